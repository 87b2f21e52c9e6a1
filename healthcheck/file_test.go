package healthcheck

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestConfigWithFile: the file's fields replace the defaults, the others stay; a bad
// value or a field the file does not know is refused with the field's name.
func TestConfigWithFile(t *testing.T) {
	got, err := DefaultConfig().WithFile([]byte(`
throttlePolls: 12
correctableECCPerMinute: 50
eventWaitTimeout: 2s
ignoredXIDs: [109]
ignoredReasons: [NVLinkErrors, XID74]
`))
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.ThrottlePolls, want.CorrectableECCPerMinute, want.EventWaitTimeout = 12, 50, 2*time.Second
	want.IgnoredXIDs, want.IgnoredReasons = []uint64{109}, []Reason{ReasonNVLinkErrors, "XID74"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}

	for file, wantErr := range map[string]string{
		"throttlePolls: 0":                   "throttlePolls must be at least 1, got 0",
		"correctableECCPerMinute: -5":        "correctableECCPerMinute must be positive",
		"ignoredReasons: [Overheating]":      `ignoredReasons has unknown reason "Overheating"`,
		"eventWaitTimeout: soon":             `eventWaitTimeout: "soon" is not a duration`,
		"recoveryPolls: three":               "recoveryPolls",
		"throttlePoll: 3":                    `unknown field "throttlePoll"`,
		"retiredPagesLimit: 60\nextra: true": `unknown field "extra"`,
	} {
		_, err := DefaultConfig().WithFile([]byte(file))
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("file %q: error %v, want one saying %q", file, err, wantErr)
		}
	}
}

// TestFileChangesClassification: a site that raises the PCIe replay limit no longer
// sees the replay rate that the default flags as a fault.
func TestFileChangesClassification(t *testing.T) {
	prev := GPUSample{PCIeReplays: 100}
	cur := GPUSample{PCIeReplays: 120} // 20 a minute
	reasons := func(cfg Config) []Reason {
		var out []Reason
		for _, f := range Classify(&prev, cur, time.Minute, cfg) {
			out = append(out, f.Reason)
		}
		return out
	}
	if got := reasons(DefaultConfig()); !cmp.Equal(got, []Reason{ReasonPCIeReplays}) {
		t.Fatalf("defaults: %v, want [PCIeReplays]", got)
	}
	cfg, err := DefaultConfig().WithFile([]byte("pcieReplaysPerMinute: 30"))
	if err != nil {
		t.Fatal(err)
	}
	if got := reasons(cfg); len(got) != 0 {
		t.Errorf("with pcieReplaysPerMinute 30: %v, want nothing", got)
	}
}

// FuzzConfigWithFile: whatever the file holds, the agent gets an error or health rules
// that pass their own checks; never a panic, never rules it would refuse.
func FuzzConfigWithFile(f *testing.F) {
	for _, seed := range []string{"", "throttlePolls: 12\n", "ignoredXIDs: [109]\nignoredReasons: [XID74]\n",
		"eventWaitTimeout: 2s", "correctableECCPerMinute: 1e309", "{}", "[]", "throttlePolls: 0", "recoveryPolls: 1.5"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, file string) {
		cfg, err := DefaultConfig().WithFile([]byte(file))
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("file %q gave rules that fail their checks: %v", file, err)
		}
	})
}
