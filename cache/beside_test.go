package cache

import "testing"

// TestBesideCount: a compacted view reads beside get.lua as many newest
// events as the last view of the session used, besideSlack more, at most
// viewBeside; viewBeside for a session no view is remembered of.
func TestBesideCount(t *testing.T) {
	s := &Store{}
	const key = "ns:adk:{1}:e:app:u:s"
	if got := s.besideCount(key); got != viewBeside {
		t.Fatalf("no view remembered: %d, want %d", got, viewBeside)
	}
	recs := func(seqs ...int64) []EventRecord {
		out := make([]EventRecord, len(seqs))
		for i, q := range seqs {
			out[i].Seq = q
		}
		return out
	}
	for _, c := range []struct {
		name string
		evs  []EventRecord
		rev  int64
		want int
	}{
		{"a compaction far below, then the newest 3", recs(4, 90, 91, 92), 92, 3 + besideSlack},
		{"the newest 21 in a row", recs(80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100), 100, 21 + besideSlack},
		{"a view without the newest event (rewound)", recs(3, 5), 9, 1 + besideSlack},
		{"a tail longer than viewBeside", recs(seqRange(1, 60)...), 60, viewBeside},
	} {
		s.besideUsed(key, c.evs, c.rev)
		if got := s.besideCount(key); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	const other = "ns:adk:{1}:e:app:u:other"
	if hintSlot(other) == hintSlot(key) {
		t.Fatal("pick another key: both share a slot")
	}
	s.besideUsed(key, recs(5), 5)
	if got := s.besideCount(other); got != viewBeside {
		t.Errorf("another session: %d, want %d", got, viewBeside)
	}
}

func seqRange(lo, hi int64) []int64 {
	var out []int64
	for q := lo; q <= hi; q++ {
		out = append(out, q)
	}
	return out
}
