package actuator

import (
	"encoding/binary"
	"testing"

	"github.com/florianl/go-tc"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// TestHTBClassWriteDecodes: a class write's payload (struct tcmsg and
// attributes, as a dump's answer carries a class too) decodes to the class
// it writes, with the 64-bit rate and ceiling where there are any.
func TestHTBClassWriteDecodes(t *testing.T) {
	big := uint64(5_000_000_000) // bytes/s: 40 Gbit/s, past 32 bits
	tests := []struct {
		name string
		opts *tc.Htb
	}{
		{"ATM with overhead", htbChildOptions(250_000, 2_000_000, tc.RateSpec{Linklayer: tcLinkLayerATM, Overhead: 44, Mpu: 96}, 3000, 1)},
		{"Ethernet", htbClassOptions(2_500_000, htbRateSpec(Framing{}), 25_000, 0)},
		{"64-bit", htbChildOptions(big, big, tc.RateSpec{Linklayer: tcLinkLayerEthernet}, htbMaxQuantum, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := htbClassWrite(7, OwnRootHandle|0x12, OwnHTBClass, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if w.typ != unix.RTM_NEWTCLASS || w.kind != "htb" {
				t.Errorf("write of type %d, kind %q; want RTM_NEWTCLASS, htb", w.typ, w.kind)
			}
			got, err := decodeClass(w.append(nil))
			if err != nil {
				t.Fatal(err)
			}
			want := tc.Object{
				Msg:       tc.Msg{Ifindex: 7, Handle: OwnRootHandle | 0x12, Parent: OwnHTBClass},
				Attribute: tc.Attribute{Kind: "htb", Htb: tt.opts},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("decoded class (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := htbClassWrite(7, 1, 2, &tc.Htb{}); err == nil {
		t.Errorf("htbClassWrite without TCA_HTB_PARMS: no error")
	}
}

// TestDecodeClassErrors: a message too short for its header or its
// options is an error, not a class.
func TestDecodeClassErrors(t *testing.T) {
	short := appendAttr(nil, htbParms, make([]byte, htbOptLen-1))
	tests := []struct {
		name string
		b    []byte
	}{
		{"header cut", make([]byte, tcmsgLen-1)},
		{"attribute past the end", append(appendTcmsg(nil, 1, 2, 3), 0xff, 0, 1, 0)},
		{"TCA_HTB_PARMS short", append(appendAttr(appendTcmsg(nil, 1, 2, 3), tcaKind, []byte("htb\x00")), appendAttr(nil, tcaOptions, short)...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if o, err := decodeClass(tt.b); err == nil {
				t.Errorf("decodeClass = %+v, want an error", o)
			}
		})
	}
	// Another kind's class comes with its kind and no HTB options.
	o, err := decodeClass(append(appendAttr(appendTcmsg(nil, 1, 2, 3), tcaKind, []byte("hfsc\x00")), appendAttr(nil, tcaOptions, short)...))
	if err != nil || o.Kind != "hfsc" || o.Htb != nil {
		t.Errorf("an hfsc class: %+v, %v; want kind hfsc, no HTB options", o, err)
	}
}

// TestWritesEncode: the bfifo and CAKE writes carry what `tc qdisc change`
// sends: a bare struct tc_fifo_qopt, and CAKE's 64-bit base rate with
// autorate-ingress off.
func TestWritesEncode(t *testing.T) {
	f := bfifoWrite(3, htbBulkLeaf, htbBulkClass, 6056)
	if f.typ != unix.RTM_NEWQDISC || f.flags != 0 || f.kind != "bfifo" || f.handle != htbBulkLeaf || f.parent != htbBulkClass {
		t.Errorf("bfifo write %+v", f)
	}
	if diff := cmp.Diff(binary.NativeEndian.AppendUint32(nil, 6056), f.options); diff != "" {
		t.Errorf("bfifo options (-want +got):\n%s", diff)
	}
	c := cakeRateWrite(3, OwnRootHandle, 2_500_000)
	q, err := decodeQdiscMessage(c.append(nil))
	if err != nil {
		t.Fatal(err)
	}
	if q.Kind != "cake" || q.Handle != OwnRootHandle || q.Parent != tc.HandleRoot || q.Ifindex != 3 {
		t.Errorf("cake write decodes to %+v", q)
	}
	s, err := decodeCakeSettings(q.Options)
	if err != nil || s.BaseRate != 2_500_000 || s.Autorate {
		t.Errorf("cake write's options: %+v, %v; want base rate 2500000 bytes/s, autorate off", s, err)
	}
	q, err = decodeQdiscMessage(cakeAutorateWrite(3, OwnRootHandle, 1_000_000, true).append(nil))
	if err != nil {
		t.Fatal(err)
	}
	if s, err := decodeCakeSettings(q.Options); err != nil || s.BaseRate != 1_000_000 || !s.Autorate {
		t.Errorf("cake hand-back's options: %+v, %v; want base rate 1000000 bytes/s, autorate on", s, err)
	}
}
