//go:build !amd64

package uml

// denyXstate has nothing to do off x86-64: the fixed-size register buffer
// it works around is x86's (xstate_amd64.go).
func denyXstate() error { return nil }

// guestEnv is empty off x86-64.
var guestEnv []string
