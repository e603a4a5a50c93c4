package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"

	"github.com/autoshape/autoshape/actuator"
	"github.com/autoshape/autoshape/controller"
	"github.com/autoshape/autoshape/internal/cli"
)

// calcResult is the JSON shape of `autoshape calc --json`.
type calcResult struct {
	GoodputKbit        float64 `json:"goodput_kbit"`
	GrossKbit          float64 `json:"gross_kbit"`
	WireBytesPerPacket float64 `json:"wire_bytes_per_packet"`
	PayloadBytes       int     `json:"payload_bytes_per_packet"`
	Efficiency         float64 `json:"efficiency"`
}

// tcpPayload returns the TCP payload of a full-size packet: the IP packet
// less the IP header (20 bytes for IPv4, 40 for IPv6) and the TCP header (20
// bytes, 32 with timestamps).
func tcpPayload(mtu, ipVersion int, timestamps bool) (int, error) {
	hdr := 20
	switch ipVersion {
	case 4:
	case 6:
		hdr = 40
	default:
		return 0, fmt.Errorf("--ip %d: want 4 or 6", ipVersion)
	}
	tcp := 20
	if timestamps {
		tcp = 32
	}
	p := mtu - hdr - tcp
	if p <= 0 {
		return 0, fmt.Errorf("--mtu %d leaves no room for TCP payload", mtu)
	}
	return p, nil
}

// calc computes the goodput of a gross rate, or the gross rate a goodput
// needs, for a framing.
func calc(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("calc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rate := fs.String("rate", "", "gross shaped rate (850kbit, 20mbit, ...): print the TCP goodput it gives")
	goodput := fs.String("goodput", "", "target TCP goodput: print the gross shaper rate it needs")
	mtu := fs.Int("mtu", 1500, "IP packet size in bytes (1492 on PPPoE)")
	overhead := fs.Int("overhead", 0, "bytes per packet below IP (PPPoE, Ethernet, VLAN, ...), as CAKE's overhead")
	atm := fs.Bool("atm", false, "ATM cells: packet + overhead padded to 48-byte cell payloads, 53 bytes each")
	ptm := fs.Bool("ptm", false, "PTM: 64/65 coding")
	ipVersion := fs.Int("ip", 4, "IP version, 4 or 6")
	timestamps := fs.Bool("tcp-timestamps", false, "TCP timestamps (32-byte TCP header)")
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: autoshape calc (--rate RATE | --goodput RATE) [--mtu N] [--overhead N] [--atm|--ptm] [--ip 4|6] [--tcp-timestamps] [--json]\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case (*rate == "") == (*goodput == ""):
		return cli.Usagef("give exactly one of --rate and --goodput")
	case *atm && *ptm:
		return cli.Usagef("--atm and --ptm exclude each other")
	case *mtu < 68 || *mtu > 65535:
		return cli.Usagef("--mtu %d: want 68 to 65535", *mtu)
	case *overhead < -64 || *overhead > 256:
		return cli.Usagef("--overhead %d: want -64 to 256", *overhead)
	}
	payload, err := tcpPayload(*mtu, *ipVersion, *timestamps)
	if err != nil {
		return cli.UsageError{Err: err}
	}
	f := actuator.Framing{Overhead: *overhead}
	switch {
	case *atm:
		f.LinkLayer = actuator.ATM
	case *ptm:
		f.LinkLayer = actuator.PTM
	}
	wire := f.WireBytes(*mtu)
	// A frame carries at least its TCP payload: a negative overhead (CAKE's
	// way to take back a header the kernel counts) may not eat into it,
	// or goodput would exceed the rate.
	if wire < float64(payload) {
		return cli.Usagef("--overhead %d with --mtu %d leaves %g bytes on the wire for %d bytes of TCP payload: a frame carries at least its payload", *overhead, *mtu, wire, payload)
	}
	eff := float64(payload) / wire
	var res calcResult
	if *rate != "" {
		r, err := controller.ParseRate(*rate)
		if err != nil || r <= 0 {
			return cli.Usagef("--rate: %v", orPositive(err))
		}
		res.GrossKbit, res.GoodputKbit = r/1000, r/1000*eff
	} else {
		g, err := controller.ParseRate(*goodput)
		if err != nil || g <= 0 {
			return cli.Usagef("--goodput: %v", orPositive(err))
		}
		res.GoodputKbit, res.GrossKbit = g/1000, g/1000/eff
	}
	res.GoodputKbit = round1(res.GoodputKbit)
	res.GrossKbit = round1(res.GrossKbit)
	res.WireBytesPerPacket = wire
	res.PayloadBytes = payload
	res.Efficiency = math.Round(eff*1e4) / 1e4
	if *asJSON {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	_, err = fmt.Fprintf(stdout, "gross %.1f kbit/s -> TCP goodput %.1f kbit/s (%d payload bytes in %.1f on the wire per packet, efficiency %.2f %%)\n",
		res.GrossKbit, res.GoodputKbit, payload, wire, 100*eff)
	return err
}

func orPositive(err error) error {
	if err != nil {
		return err
	}
	return errors.New("the rate must be positive")
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }
