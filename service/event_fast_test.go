package service

import (
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The fast paths of event JSON give the bytes and values encoding/json and
// big.Float give.

var fastStrings = []string{
	"", "id", "invocationId", "e-0b7c6a2e-1f1d-4c57-9a43-2b5f4c1d9e10", "agent name", "a\"b", `a\b`, "<script>",
	"a&b", "tab\there", "nl\n", "\x00", "\x7f", "é", "\u2028", "\xff", "{}", "a:b", "a/b",
}

func TestDecodeStringMatchesJSON(t *testing.T) {
	t.Parallel()
	raws := []string{`"a\u0041"`, `"\ud800"`, `"x`, `x"`, `"`, `""`, `null`, `1`, "\"\xff\""}
	for _, s := range fastStrings {
		b, _ := json.Marshal(s)
		raws = append(raws, string(b))
	}
	for _, raw := range raws {
		var got Event
		var want string
		gotErr := got.UnmarshalJSON([]byte(`{"id":` + raw + `}`))
		wantErr := json.Unmarshal([]byte(raw), &want)
		require.Equal(t, wantErr == nil, gotErr == nil, "%q", raw)
		require.Equal(t, want, got.ID, "%q", raw)
	}
}

// bigEpoch is parseEpoch's big.Float reading of float epoch seconds.
func bigEpoch(s string) int64 {
	f, _ := new(big.Float).SetPrec(128).SetString(s)
	if f.Cmp(big.NewFloat(1e11)) > 0 {
		f.Quo(f, big.NewFloat(1000))
	}
	us := new(big.Float).SetPrec(128).Mul(f, big.NewFloat(1e6))
	half := big.NewFloat(0.5)
	if us.Sign() < 0 {
		half.Neg(half)
	}
	n, _ := us.Add(us, half).Int64()
	return n
}

func TestEpochMicrosMatchesBigFloat(t *testing.T) {
	t.Parallel()
	in := []string{"0.0", "1", "1.5", "00012.000001", "99999999999.999999", "1735787045.123456", "1735787045.1"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		digits := r.IntN(7)
		s := fmt.Sprint(r.Int64N(1e11))
		if digits > 0 {
			s += fmt.Sprintf(".%0*d", digits, r.Int64N(int64(pow10(digits))))
		}
		in = append(in, s)
	}
	for _, s := range in {
		us, ok := epochMicros(s)
		require.True(t, ok, s)
		require.Equal(t, bigEpoch(s), us, s)
		got, err := parseEpoch(json.RawMessage(s))
		require.NoError(t, err)
		require.Equal(t, time.UnixMicro(bigEpoch(s)).UTC(), got, s)
	}
	for _, s := range []string{"", ".5", "1.", "-1.5", "1e9", "1.1234567", "100000000000", "1735787045123", "1_0", "+1"} {
		_, ok := epochMicros(s)
		require.False(t, ok, s)
	}
}

func pow10(n int) int {
	p := 1
	for range n {
		p *= 10
	}
	return p
}

func TestEpochSecondsRoundTrips(t *testing.T) {
	t.Parallel()
	for _, us := range []int64{1, 999999, 1000000, 1735787045123456, 1735787045000001, -1, -1500000} {
		b := appendEpochSeconds(nil, time.UnixMicro(us))
		sign := ""
		abs := us
		if us < 0 {
			sign, abs = "-", -us
		}
		require.Equal(t, fmt.Sprintf("%s%d.%06d", sign, abs/1e6, abs%1e6), string(b))
		got, err := parseEpoch(json.RawMessage(b))
		require.NoError(t, err)
		require.Equal(t, us, got.UnixMicro())
	}
}
