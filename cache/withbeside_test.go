package cache

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestWithBeside: the events get.lua names beside it, as runs of seqs, are
// taken from the newest events read beside the script, in seq order; a
// reply that is no list of runs, or names an event the read lacks, is an
// error.
func TestWithBeside(t *testing.T) {
	newest := func(seqs ...int64) *redis.ZSliceCmd {
		cmd := redis.NewZSliceCmd(context.Background())
		var zs []redis.Z
		for _, q := range seqs {
			zs = append(zs, redis.Z{Score: float64(q * 10), Member: fmt.Sprintf(`%d:{"id":"e%d"}`, q, q)})
		}
		cmd.SetVal(zs)
		return cmd
	}
	seqsOf := func(evs []EventRecord) []int64 {
		var out []int64
		for _, e := range evs {
			out = append(out, e.Seq)
		}
		return out
	}
	older := []EventRecord{{Seq: 1}}
	for _, c := range []struct {
		name string
		runs []any
		read []int64
		want []int64 // nil: an error
	}{
		{"none", []any{}, []int64{8, 9}, []int64{1}},
		{"one run", []any{int64(8), int64(10)}, []int64{7, 8, 9, 10}, []int64{1, 8, 9, 10}},
		{"two runs and a single", []any{int64(5), int64(6), int64(8), int64(8), int64(10), int64(11)}, []int64{4, 5, 6, 7, 8, 9, 10, 11}, []int64{1, 5, 6, 8, 10, 11}},
		{"an event the read lacks", []any{int64(8), int64(10)}, []int64{8, 10}, nil},
		{"past the newest", []any{int64(9), int64(12)}, []int64{8, 9, 10}, nil},
		{"odd list", []any{int64(8)}, []int64{8}, nil},
		{"run backwards", []any{int64(9), int64(8)}, []int64{8, 9}, nil},
		{"runs not apart", []any{int64(5), int64(6), int64(7), int64(8)}, []int64{5, 6, 7, 8}, nil},
		{"not a seq", []any{"8", int64(8)}, []int64{8}, nil},
	} {
		got, err := withBeside(older, c.runs, newest(c.read...))
		if c.want == nil {
			require.Error(t, err, c.name)
			continue
		}
		require.NoError(t, err, c.name)
		require.Equal(t, c.want, seqsOf(got), c.name)
	}
	_, err := withBeside(older, "x", newest(1))
	require.Error(t, err, "not a list")
}
