package healthcheck

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

func TestXIDCatalog(t *testing.T) {
	// One row per catalogued XID; TestXIDCatalogIsCovered keeps the two in step.
	tests := map[uint64]struct {
		wantSeverity   Health
		wantAction     chamber.FaultAction
		wantPersistent bool
	}{
		13:  {Healthy, chamber.FaultActionIgnore, false},
		31:  {Healthy, chamber.FaultActionIgnore, false},
		43:  {Healthy, chamber.FaultActionIgnore, false},
		45:  {Healthy, chamber.FaultActionIgnore, false},
		68:  {Healthy, chamber.FaultActionIgnore, false},
		109: {Healthy, chamber.FaultActionIgnore, false},
		137: {Healthy, chamber.FaultActionIgnore, false},
		32:  {Degraded, chamber.FaultActionResetGPU, false},
		38:  {Unhealthy, chamber.FaultActionRebootNode, true},
		44:  {Unhealthy, chamber.FaultActionResetGPU, true},
		54:  {Unhealthy, chamber.FaultActionDrainAndReplace, true},
		61:  {Unhealthy, chamber.FaultActionResetGPU, true},
		62:  {Unhealthy, chamber.FaultActionResetGPU, true},
		69:  {Unhealthy, chamber.FaultActionResetGPU, true},
		48:  {Unhealthy, chamber.FaultActionResetGPU, true},
		63:  {Degraded, chamber.FaultActionResetGPU, false},
		64:  {Unhealthy, chamber.FaultActionRebootNode, true},
		92:  {Degraded, chamber.FaultActionResetGPU, false},
		94:  {Degraded, chamber.FaultActionResetGPU, false},
		95:  {Unhealthy, chamber.FaultActionResetGPU, true},
		140: {Unhealthy, chamber.FaultActionResetGPU, true},
		171: {Unhealthy, chamber.FaultActionResetGPU, true},
		172: {Unhealthy, chamber.FaultActionResetGPU, true},
		74:  {Unhealthy, chamber.FaultActionResetGPU, true},
		79:  {Unhealthy, chamber.FaultActionRebootNode, true},
		121: {Degraded, chamber.FaultActionResetGPU, false},
		136: {Unhealthy, chamber.FaultActionResetGPU, true},
		167: {Unhealthy, chamber.FaultActionRebootNode, true},
		110: {Unhealthy, chamber.FaultActionResetGPU, true},
		119: {Unhealthy, chamber.FaultActionResetGPU, true},
		120: {Unhealthy, chamber.FaultActionResetGPU, true},
		123: {Unhealthy, chamber.FaultActionResetGPU, true},
		143: {Unhealthy, chamber.FaultActionRebootNode, true},
		154: {Unhealthy, chamber.FaultActionResetGPU, true},
		169: {Unhealthy, chamber.FaultActionResetGPU, true},
	}
	cfg := DefaultConfig()
	for code, tc := range tests {
		t.Run(string(XIDReason(code)), func(t *testing.T) {
			x := LookupXID(code)
			if !x.Known {
				t.Fatalf("XID %d is not in the catalog", code)
			}
			got := struct {
				Severity   Health
				Action     chamber.FaultAction
				Persistent bool
			}{x.Severity, x.Action, x.Persistent}
			want := struct {
				Severity   Health
				Action     chamber.FaultAction
				Persistent bool
			}{tc.wantSeverity, tc.wantAction, tc.wantPersistent}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("LookupXID(%d) (-want +got):\n%s", code, diff)
			}
			f, raises := ClassifyXID(code, cfg)
			if wantRaises := tc.wantSeverity != Healthy; raises != wantRaises {
				t.Fatalf("ClassifyXID(%d) raises = %v, want %v", code, raises, wantRaises)
			}
			if raises && (f.Reason != XIDReason(code) || f.Severity != tc.wantSeverity || f.Persistent != tc.wantPersistent) {
				t.Errorf("ClassifyXID(%d) = %+v", code, f)
			}
		})
	}
}

func TestXIDCatalogIsCovered(t *testing.T) {
	// The application errors of the design never make a GPU unhealthy; the hardware
	// codes it names always do.
	for _, code := range []uint64{13, 31, 43, 45} {
		if _, raises := ClassifyXID(code, DefaultConfig()); raises {
			t.Errorf("application XID %d raises a fault", code)
		}
	}
	for _, code := range []uint64{48, 64, 74, 79, 95, 119, 120} {
		if x := LookupXID(code); x.Severity != Unhealthy {
			t.Errorf("hardware XID %d has severity %s, want Unhealthy", code, x.Severity)
		}
	}
	for _, code := range []uint64{63, 92, 94} {
		if x := LookupXID(code); x.Severity != Degraded {
			t.Errorf("XID %d has severity %s, want Degraded", code, x.Severity)
		}
	}
	codes := map[uint64]bool{}
	for _, x := range XIDCatalog() {
		if codes[x.Code] {
			t.Errorf("XID %d is in the catalog twice", x.Code)
		}
		codes[x.Code] = true
		if x.Name == "" {
			t.Errorf("XID %d has no name", x.Code)
		}
	}
	if len(codes) != 35 {
		t.Errorf("catalog has %d codes; update TestXIDCatalog with the new ones", len(codes))
	}
}

func TestClassifyXIDUnknownAndIgnored(t *testing.T) {
	tests := map[string]struct {
		code         uint64
		ignored      []uint64
		wantRaises   bool
		wantSeverity Health
	}{
		"unknown code is degraded, not unhealthy": {code: 999, wantRaises: true, wantSeverity: Degraded},
		"ignored hardware code":                   {code: 74, ignored: []uint64{74}, wantRaises: false},
		"ignore list does not touch others":       {code: 79, ignored: []uint64{74}, wantRaises: true, wantSeverity: Unhealthy},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.IgnoredXIDs = tc.ignored
			f, raises := ClassifyXID(tc.code, cfg)
			if raises != tc.wantRaises || f.Severity != tc.wantSeverity {
				t.Errorf("ClassifyXID(%d) = %+v, %v; want severity %q, raises %v", tc.code, f, raises, tc.wantSeverity, tc.wantRaises)
			}
		})
	}
}

func TestActionTakesNode(t *testing.T) {
	tests := map[chamber.FaultAction]bool{
		chamber.FaultActionIgnore:          false,
		chamber.FaultActionWatch:           false,
		chamber.FaultActionResetGPU:        false,
		chamber.FaultActionRebootNode:      true,
		chamber.FaultActionDrainAndReplace: true,
		// An agent too old to report actions, or one newer than this controller.
		"":           true,
		"PowerCycle": true,
	}
	for action, want := range tests {
		t.Run(string(action), func(t *testing.T) {
			if got := action.TakesNode(); got != want {
				t.Errorf("Action(%q).TakesNode() = %v, want %v", action, got, want)
			}
		})
	}
}
