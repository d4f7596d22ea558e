package persist

import (
	"reflect"
	"testing"
)

// The tests use only the standard library: testify's own dependencies are
// not in go.sum.

// must fails the test at once on an error.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// same fails the test at once unless got and want are deeply equal.
func same(t testing.TB, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got: %#v\nwant: %#v", what, got, want)
	}
}
