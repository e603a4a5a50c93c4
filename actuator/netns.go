package actuator

import "github.com/vishvananda/netns"

// nsHandle converts a namespace file descriptor to the netns package's type.
func nsHandle(fd int) netns.NsHandle { return netns.NsHandle(fd) }
