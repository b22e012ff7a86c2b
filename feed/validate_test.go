package feed

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestCheckPointRules walks each rule of CheckPoint once.
func TestCheckPointRules(t *testing.T) {
	lim := PointLimits{MaxNameBytes: 16, MaxStringBytes: 8}
	ok := Point{Table: "m", Tags: []Tag{{Key: "h", Value: "a\u0085b"}}, Fields: []PointField{{Key: "v", Value: Value{Kind: KindString, Str: "x\x00\n"}}}, Time: MaxTime}
	if err := CheckPoint(&ok, lim); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		mut  func(p *Point)
		want error
	}{
		"time above":            {func(p *Point) { p.Time = MaxTime + 1 }, ErrTimeRange},
		"time below":            {func(p *Point) { p.Time = MinTime - 1 }, ErrTimeRange},
		"NUL in a tag value":    {func(p *Point) { p.Tags[0].Value = "a\x00" }, ErrInvalidValue},
		"0x01 in a tag value":   {func(p *Point) { p.Tags[0].Value = "a\x01" }, ErrInvalidValue},
		"DEL in a tag value":    {func(p *Point) { p.Tags[0].Value = "a\x7f" }, ErrInvalidValue},
		"tag value backslash":   {func(p *Point) { p.Tags[0].Value = `a\` }, ErrInvalidValue},
		"tag value too long":    {func(p *Point) { p.Tags[0].Value = "123456789" }, ErrInvalidValue},
		"tag value not UTF-8":   {func(p *Point) { p.Tags[0].Value = "\xff" }, ErrInvalidValue},
		"empty tag value":       {func(p *Point) { p.Tags[0].Value = "" }, ErrInvalidValue},
		"string too long":       {func(p *Point) { p.Fields[0].Value.Str = "123456789" }, ErrInvalidValue},
		"string not UTF-8":      {func(p *Point) { p.Fields[0].Value.Str = "\xc3" }, ErrInvalidValue},
		"NaN":                   {func(p *Point) { p.Fields[0].Value = Value{Kind: KindFloat, Num: 0x7ff8000000000001} }, ErrInvalidValue},
		"measurement NUL":       {func(p *Point) { p.Table = "m\x00" }, ErrInvalidName},
		"measurement backslash": {func(p *Point) { p.Table = `m\` }, ErrInvalidName},
		"tag key reserved":      {func(p *Point) { p.Tags[0].Key = "x_h" }, ErrInvalidName},
		"field key time":        {func(p *Point) { p.Fields[0].Key = "time" }, ErrInvalidName},
		"field key too long":    {func(p *Point) { p.Fields[0].Key = strings.Repeat("f", 17) }, ErrInvalidName},
		"tag and field":         {func(p *Point) { p.Fields[0].Key = "h" }, ErrMalformedPoint},
		"no field":              {func(p *Point) { p.Fields = nil }, ErrMalformedPoint},
	} {
		p := ok
		p.Tags = slices.Clone(ok.Tags)
		p.Fields = slices.Clone(ok.Fields)
		tc.mut(&p)
		if err := CheckPoint(&p, lim); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", name, err, tc.want)
		}
	}
}
