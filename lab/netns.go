package lab

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// InNS runs fn on an OS thread moved into the namespace ns. Sockets fn
// creates stay in ns afterwards, whichever goroutine uses them. The thread
// is thrown away after fn, so no other goroutine ever runs in ns by accident.
func InNS(ns string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		h, err := netns.GetFromName(ns)
		if err != nil {
			done <- fmt.Errorf("namespace %s: %w", ns, err)
			return
		}
		err = netns.Set(h)
		h.Close()
		if err != nil {
			done <- fmt.Errorf("enter namespace %s: %w", ns, err)
			return
		}
		done <- fn()
	}()
	return <-done
}
