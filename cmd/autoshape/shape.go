package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/internal/cli"
)

// shape sets up static shaping on an interface once, or removes it.
func shape(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("shape", flag.ContinueOnError)
	fs.SetOutput(stderr)
	iface := fs.String("iface", "", "WAN interface: its egress is shaped for upload")
	ifb := fs.String("ifb", "", "IFB interface for the download shaper (default ifb4IFACE)")
	up := fs.String("up", "", "upload rate: 850kbit, 20mbit, 1.5gbit or bit/s")
	down := fs.String("down", "", "download rate, as --up")
	backendName := fs.String("backend", "cake", "shaping backend: cake or htb")
	overhead := fs.Int("overhead", 0, "bytes of link-layer overhead per packet")
	atm := fs.Bool("atm", false, "ATM cell framing (ADSL)")
	ptm := fs.Bool("ptm", false, "PTM 64/65 framing (VDSL2)")
	mpu := fs.Uint("mpu", 0, "minimum packet unit in bytes")
	replace := fs.Bool("replace", false, "replace a root qdisc on IFACE or the IFB that autoshape did not create (sqm-scripts', say)")
	remove := fs.Bool("remove", false, "remove the shaping autoshape set up on IFACE and the IFB, then exit; other software's is left alone")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: autoshape shape --iface IF [--ifb NAME] --up RATE --down RATE [--backend cake|htb] [--overhead N] [--atm|--ptm] [--mpu N] [--replace]\n       autoshape shape --iface IF [--ifb NAME] --remove\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *iface == "" {
		return cli.Usagef("--iface is required")
	}
	if *remove {
		if *up != "" || *down != "" {
			return cli.Usagef("--remove takes no rates")
		}
		if *replace {
			return cli.Usagef("--remove and --replace exclude each other")
		}
		if err := actuator.RemoveShaping(*iface, *ifb, 0); err != nil {
			return shapeErr(err)
		}
		fmt.Fprintf(stdout, "removed autoshape's shaping from %s and %s (shaping it did not create is left alone)\n", *iface, ifbName(*iface, *ifb))
		return nil
	}
	if *atm && *ptm {
		return cli.Usagef("--atm and --ptm exclude each other")
	}
	backend, err := actuator.ParseBackend(*backendName)
	if err != nil {
		return cli.Usagef("--backend: %v", err)
	}
	// Static rates: CAKE's autorate-ingress would move the download's.
	cfg := actuator.SetupConfig{Iface: *iface, IFB: *ifb, Backend: backend, Replace: *replace,
		Framing: actuator.Framing{Overhead: *overhead, MPU: uint32(*mpu)},
		Cake:    actuator.CakeOptions{AutorateIngress: new(false)}}
	if *atm {
		cfg.Framing.LinkLayer = actuator.ATM
	}
	if *ptm {
		cfg.Framing.LinkLayer = actuator.PTM
	}
	for _, r := range []struct {
		flag, val string
		dst       *uint64
	}{{"--up", *up, &cfg.Up}, {"--down", *down, &cfg.Down}} {
		if r.val == "" {
			return cli.Usagef("%s is required", r.flag)
		}
		bps, err := controller.ParseRate(r.val)
		if err != nil {
			return cli.Usagef("%s: %v", r.flag, err)
		}
		if bps < 1000 {
			return cli.Usagef("%s %s: the rate must be at least 1kbit", r.flag, r.val)
		}
		*r.dst = uint64(bps)
	}
	if err := cfg.Validate(); err != nil {
		return cli.UsageError{Err: err}
	}
	l, err := actuator.Setup(cfg)
	if errors.Is(err, actuator.ErrForeignQdisc) {
		return cli.Usagef("%v; autoshape left it as it is: pass --replace to replace it with autoshape's shaping", err)
	}
	if err != nil {
		return shapeErr(err)
	}
	defer l.Close()
	fmt.Fprintf(stdout, "shaping %s: up %s on %s, down %s on %s (%s)\n", *iface,
		controller.FormatRate(float64(cfg.Up)), *iface, controller.FormatRate(float64(cfg.Down)), ifbName(*iface, *ifb), backend)
	return nil
}

func ifbName(iface, ifb string) string {
	if ifb != "" {
		return ifb
	}
	return actuator.DefaultIFB(iface)
}

// shapeErr marks the errors a user can fix (a missing interface, a kernel
// without CAKE, missing privileges, no shaping to attach to) as usage errors:
// exit status 2. Setup has already rolled back whatever it had created.
func shapeErr(err error) error {
	switch {
	case errors.Is(err, actuator.ErrLinkGone), errors.Is(err, actuator.ErrNotSupported),
		errors.Is(err, actuator.ErrNoQdisc), actuator.IsPermission(err):
		return cli.UsageError{Err: err}
	}
	return err
}
