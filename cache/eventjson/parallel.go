package eventjson

import (
	"runtime"
	"sync"
)

// perWorker is the fewest events InParallel gives a goroutine of its own:
// below it, starting one costs more than it saves.
const perWorker = 128

// InParallel calls convert on consecutive ranges [from, to) that together
// cover [0, n), on up to GOMAXPROCS goroutines when n is large enough to be
// worth it (a long history read or decoded), and returns the error of the
// lowest range that failed, as one loop over [0, n) would.
func InParallel(n int, convert func(from, to int) error) error {
	workers := min(runtime.GOMAXPROCS(0), n/perWorker)
	if workers <= 1 {
		return convert(0, n)
	}
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { errs[w] = convert(w*n/workers, (w+1)*n/workers) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
