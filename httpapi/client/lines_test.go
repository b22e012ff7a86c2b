package client

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLPLines splits pages as line protocol reads them: a newline inside
// a quoted string field value stays in its line, a double quote elsewhere
// (a tag value, a field key) opens nothing, and a page whose last line
// has no newline is incomplete.
func TestLPLines(t *testing.T) {
	for _, tc := range []struct {
		body     string
		lines    []string
		complete bool
	}{
		{"", nil, true},
		{"m v=1 1\nm v=2 2\n", []string{"m v=1 1", "m v=2 2"}, true},
		{"m v=1 1\nm v=2 2", []string{"m v=1 1"}, false},
		{"m s=\"a\nb\" 1\nm v=2 2\n", []string{"m s=\"a\nb\" 1", "m v=2 2"}, true},
		{"m s=\"a\\\"\nb\" 1\n", []string{"m s=\"a\\\"\nb\" 1"}, true},
		{"m,t=a\"b v=1 1\nm v=2 2\n", []string{"m,t=a\"b v=1 1", "m v=2 2"}, true},
		{"m s=\"open\n", nil, false},
		{"m,t=a\\ b v=1,s=\"x\" 1\n", []string{"m,t=a\\ b v=1,s=\"x\" 1"}, true},
	} {
		var got []string
		complete := lpLines([]byte(tc.body), func(l []byte) bool { got = append(got, string(l)); return true })
		require.Equal(t, tc.lines, got, "%q", tc.body)
		require.Equal(t, tc.complete, complete, "%q", tc.body)
	}
}
