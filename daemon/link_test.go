package daemon

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/autoshape/autoshape/config"
)

// TestForgetsLoseNothing: however many reflectors the pool lets go before
// the loop drains them, the estimator hears of each, once.
func TestForgetsLoseNothing(t *testing.T) {
	var f forgets
	var want []string
	for i := range 100 {
		name := fmt.Sprintf("192.0.2.%d", i)
		want = append(want, name)
		f.add(name)
		f.add(name)
	}
	var got []string
	f.drain(func(name string) { got = append(got, name) })
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("forgotten (-want +got):\n%s", diff)
	}
	got = nil
	f.drain(func(name string) { got = append(got, name) })
	if len(got) != 0 {
		t.Errorf("a second drain forgot %v again", got)
	}
}

// TestLinkEqual: a link that differs in any key the loop uses restarts on
// reload; one that differs in nothing runs on.
func TestLinkEqual(t *testing.T) {
	cfg, err := config.Parse(`
[[link]]
interface = "wan"
mode = "setup"
replace = true
[link.download]
min = "1mbit"
base = "10mbit"
max = "20mbit"
[link.upload]
min = "1mbit"
base = "2mbit"
max = "5mbit"
`)
	if err != nil {
		t.Fatalf("config.Parse() failed: %v", err)
	}
	l := cfg.Links[0]
	for _, tt := range []struct {
		name   string
		change func(*config.Link)
		want   bool
	}{
		{"nothing", func(*config.Link) {}, true},
		{"replace", func(l *config.Link) { l.Replace = false }, false},
		{"budget", func(l *config.Link) { l.Budget *= 2 }, false},
		{"reflectors", func(l *config.Link) { l.Reflectors = l.Reflectors[1:] }, false},
		{"download base", func(l *config.Link) { l.Directions[0].Bounds.Base *= 1.5 }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			next := l
			next.Reflectors = slices.Clone(l.Reflectors)
			tt.change(&next)
			if got := linkEqual(next, l); got != tt.want {
				t.Errorf("linkEqual() = %v, want %v", got, tt.want)
			}
		})
	}
}
