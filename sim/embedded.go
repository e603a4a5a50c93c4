package sim

import (
	"bytes"
	_ "embed"
)

// The default link of `autoshape-tools simulate`; see traces/README.md.
var (
	//go:embed traces/Verizon-LTE-short.down
	embeddedDown []byte
	//go:embed traces/Verizon-LTE-short.up
	embeddedUp []byte
)

// Embedded names of the embedded trace pair.
const (
	EmbeddedDownName = "embedded:Verizon-LTE-short.down"
	EmbeddedUpName   = "embedded:Verizon-LTE-short.up"
)

// EmbeddedTraces returns the embedded LTE trace pair (down, up).
func EmbeddedTraces() (down, up *Trace) {
	d, err := ParseMahimahi(EmbeddedDownName, bytes.NewReader(embeddedDown))
	if err != nil {
		panic("embedded trace: " + err.Error())
	}
	u, err := ParseMahimahi(EmbeddedUpName, bytes.NewReader(embeddedUp))
	if err != nil {
		panic("embedded trace: " + err.Error())
	}
	return d, u
}
