package eventjson

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
)

// TestInParallel: the ranges cover [0, n) once each, split over several
// goroutines only when n is large, and the error is the lowest failing
// range's whatever the goroutines' timing.
func TestInParallel(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		runtime.GOMAXPROCS(2)
		t.Cleanup(func() { runtime.GOMAXPROCS(1) })
	}
	for _, n := range []int{0, 1, perWorker - 1, 2 * perWorker, 10*perWorker + 7} {
		var mu sync.Mutex
		seen := make([]int, n)
		calls := 0
		err := InParallel(n, func(from, to int) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			for i := from; i < to; i++ {
				seen[i]++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range seen {
			if c != 1 {
				t.Fatalf("n=%d: item %d converted %d times", n, i, c)
			}
		}
		if want := max(1, min(runtime.GOMAXPROCS(0), n/perWorker)); calls != want {
			t.Errorf("n=%d: %d ranges, want %d", n, calls, want)
		}
	}
	n := 10 * perWorker
	err := InParallel(n, func(from, to int) error {
		if from > 0 {
			return fmt.Errorf("range from %d", from)
		}
		return errors.New("first")
	})
	if err == nil || err.Error() != "first" {
		t.Fatalf("error %v, want the first range's", err)
	}
}
