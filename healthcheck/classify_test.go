package healthcheck

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	chamber "chamber.dev/chamber/api/v1alpha1"
)

// sample builds a GPUSample for rule tests.
type sample GPUSample

func newSample() *sample { return &sample{Index: 0, UUID: "GPU-0", TemperatureC: 40} }

func (s *sample) volatileDBE(n uint64) *sample  { s.ECC.VolatileUncorrected = n; return s }
func (s *sample) aggregateDBE(n uint64) *sample { s.ECC.AggregateUncorrected = n; return s }
func (s *sample) corrected(n uint64) *sample    { s.ECC.VolatileCorrected = n; return s }
func (s *sample) remap(r RowRemap) *sample      { s.RowRemap = r; return s }
func (s *sample) retired(r RetiredPages) *sample {
	s.RetiredPages = r
	return s
}
func (s *sample) throttle(bits uint64) *sample { s.ThrottleReasons = bits; return s }
func (s *sample) replays(n uint64) *sample     { s.PCIeReplays = n; return s }
func (s *sample) nvlinkCRC(n uint64) *sample   { s.NVLink.CRCFlit = n; return s }
func (s *sample) lost() *sample                { s.Lost = true; return s }
func (s *sample) readError(f Field, err error) *sample {
	s.Errors = append(s.Errors, ReadError{Field: f, Err: err})
	return s
}
func (s *sample) unsupported(f Field) *sample { s.Unsupported = s.Unsupported.With(f); return s }
func (s *sample) obj() GPUSample              { return GPUSample(*s) }
func (s *sample) ptr() *GPUSample             { g := GPUSample(*s); return &g }

func TestClassify(t *testing.T) {
	tests := map[string]struct {
		prev        *GPUSample
		cur         GPUSample
		elapsed     time.Duration
		wantReasons []Reason
	}{
		"clean":                                  {cur: newSample().obj()},
		"unsupported readings are no fault":      {cur: newSample().unsupported(FieldRetiredPagesPending).unsupported(FieldNVLink).obj()},
		"volatile double-bit error":              {cur: newSample().volatileDBE(1).obj(), wantReasons: []Reason{ReasonECCDoubleBit}},
		"lifetime double-bit count rose":         {prev: newSample().aggregateDBE(2).ptr(), cur: newSample().aggregateDBE(3).obj(), elapsed: 10 * time.Second, wantReasons: []Reason{ReasonECCDoubleBit}},
		"old lifetime double-bit errors":         {cur: newSample().aggregateDBE(3).obj()},
		"one corrected error":                    {prev: newSample().ptr(), cur: newSample().corrected(1).obj(), elapsed: 10 * time.Second},
		"corrected error storm":                  {prev: newSample().corrected(10).ptr(), cur: newSample().corrected(40).obj(), elapsed: 10 * time.Second, wantReasons: []Reason{ReasonECCSingleBitRate}},
		"corrected counter reset by a GPU reset": {prev: newSample().corrected(500).ptr(), cur: newSample().corrected(2).obj(), elapsed: 10 * time.Second},
		"row remap failure":                      {cur: newSample().remap(RowRemap{Uncorrectable: 8, Failure: true}).obj(), wantReasons: []Reason{ReasonRowRemapFailure}},
		"row remap pending":                      {cur: newSample().remap(RowRemap{Uncorrectable: 1, Pending: true}).obj(), wantReasons: []Reason{ReasonRowRemapPending}},
		"remapped rows alone are fine":           {cur: newSample().remap(RowRemap{Correctable: 3, Uncorrectable: 1}).obj()},
		"page retirement pending":                {cur: newSample().retired(RetiredPages{DoubleBit: 1, Pending: true}).obj(), wantReasons: []Reason{ReasonRetiredPagesPending}},
		"retired pages at the limit":             {cur: newSample().retired(RetiredPages{SingleBit: 50, DoubleBit: 10}).obj(), wantReasons: []Reason{ReasonRetiredPagesLimit}},
		"hardware thermal slowdown":              {cur: newSample().throttle(ThrottleHWThermalSlowdown).obj(), wantReasons: []Reason{ReasonThermalThrottle}},
		"software thermal slowdown":              {cur: newSample().throttle(ThrottleSWThermalSlowdown).obj(), wantReasons: []Reason{ReasonThermalThrottle}},
		"power brake slowdown":                   {cur: newSample().throttle(ThrottleHWPowerBrake).obj(), wantReasons: []Reason{ReasonPowerThrottle}},
		"software power cap is routine":          {cur: newSample().throttle(ThrottleSWPowerCap | ThrottleGPUIdle).obj()},
		"PCIe replays over the limit":            {prev: newSample().replays(100).ptr(), cur: newSample().replays(110).obj(), elapsed: time.Minute, wantReasons: []Reason{ReasonPCIeReplays}},
		"PCIe replays under the limit":           {prev: newSample().replays(100).ptr(), cur: newSample().replays(105).obj(), elapsed: time.Minute},
		"NVLink errors over the limit":           {prev: newSample().ptr(), cur: newSample().nvlinkCRC(50).obj(), elapsed: 10 * time.Second, wantReasons: []Reason{ReasonNVLinkErrors}},
		"NVML read error":                        {cur: newSample().readError(FieldPower, errors.New("ERROR_UNKNOWN")).obj(), wantReasons: []Reason{ReasonNVMLReadError}},
		"lost GPU hides nothing else":            {cur: newSample().lost().readError(FieldMemory, errors.New("ERROR_GPU_IS_LOST")).obj(), wantReasons: []Reason{ReasonGPULost}},
		"several at once": {
			cur:         newSample().volatileDBE(1).remap(RowRemap{Pending: true, Failure: true}).throttle(ThrottleHWThermalSlowdown).obj(),
			wantReasons: []Reason{ReasonECCDoubleBit, ReasonRowRemapFailure, ReasonRowRemapPending, ReasonThermalThrottle},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			findings := Classify(tc.prev, tc.cur, tc.elapsed, DefaultConfig())
			var got []Reason
			for _, f := range findings {
				got = append(got, f.Reason)
				if want, _ := Rule(f.Reason); f.Severity != want.Severity || f.Action != want.Action || f.Persistent != want.Persistent {
					t.Errorf("finding %+v does not follow its rule %+v", f, want)
				}
				if f.Message == "" {
					t.Errorf("finding %s has no message", f.Reason)
				}
			}
			if diff := cmp.Diff(tc.wantReasons, got, cmpopts.SortSlices(func(a, b Reason) bool { return a < b }), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Classify reasons (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRules(t *testing.T) {
	tests := map[Reason]struct {
		wantSeverity   Health
		wantAction     chamber.FaultAction
		wantPersistent bool
	}{
		ReasonGPULost:             {Unhealthy, chamber.FaultActionRebootNode, true},
		ReasonECCDoubleBit:        {Unhealthy, chamber.FaultActionResetGPU, true},
		ReasonECCSingleBitRate:    {Degraded, chamber.FaultActionResetGPU, false},
		ReasonRowRemapFailure:     {Unhealthy, chamber.FaultActionDrainAndReplace, true},
		ReasonRowRemapPending:     {Degraded, chamber.FaultActionResetGPU, false},
		ReasonRetiredPagesPending: {Degraded, chamber.FaultActionResetGPU, false},
		ReasonRetiredPagesLimit:   {Unhealthy, chamber.FaultActionDrainAndReplace, true},
		ReasonThermalThrottle:     {Degraded, chamber.FaultActionWatch, false},
		ReasonPowerThrottle:       {Degraded, chamber.FaultActionWatch, false},
		ReasonPCIeReplays:         {Degraded, chamber.FaultActionWatch, false},
		ReasonNVLinkErrors:        {Degraded, chamber.FaultActionWatch, false},
		ReasonNVMLReadError:       {Degraded, chamber.FaultActionWatch, false},
		ReasonDCGMHealthFail:      {Unhealthy, chamber.FaultActionResetGPU, false},
		ReasonDCGMHealthWarn:      {Degraded, chamber.FaultActionWatch, false},
	}
	if len(tests) != len(rules) {
		t.Fatalf("%d rules, %d rows: add the new rule here", len(rules), len(tests))
	}
	for r, tc := range tests {
		t.Run(string(r), func(t *testing.T) {
			f, ok := Rule(r)
			if !ok {
				t.Fatalf("Rule(%s) unknown", r)
			}
			want := Finding{Reason: r, Severity: tc.wantSeverity, Action: tc.wantAction, Persistent: tc.wantPersistent, Message: f.Message}
			if diff := cmp.Diff(want, f); diff != "" {
				t.Errorf("Rule(%s) (-want +got):\n%s", r, diff)
			}
		})
	}
}
