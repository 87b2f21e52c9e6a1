package v1alpha1

import "testing"

func TestQuotaUsed(t *testing.T) {
	cases := map[string]struct {
		flavors []FlavorSpend
		want    float64
		wantOK  bool
	}{
		"no spend":      {},
		"no quota time": {flavors: []FlavorSpend{{Flavor: "a", GPUSeconds: 3600}}},
		// 8 GPUs of quota for an hour, 4 held: half.
		"half the quota": {flavors: []FlavorSpend{{Flavor: "a", GPUSeconds: 4 * 3600, QuotaGPUSeconds: 8 * 3600}}, want: 0.5, wantOK: true},
		// 4 GPUs of quota, 8 held of which 4 borrowed: all of it, and no more.
		"borrowing counts no more than the whole quota": {flavors: []FlavorSpend{{Flavor: "a", GPUSeconds: 8 * 3600, BorrowedGPUSeconds: 4 * 3600, QuotaGPUSeconds: 4 * 3600}}, want: 1, wantOK: true},
		// (3 + 1) hours within 4 + 4 hours of quota.
		"flavors together": {flavors: []FlavorSpend{
			{Flavor: "a", GPUSeconds: 3 * 3600, QuotaGPUSeconds: 4 * 3600},
			{Flavor: "b", GPUSeconds: 2 * 3600, BorrowedGPUSeconds: 3600, QuotaGPUSeconds: 4 * 3600},
		}, want: 0.5, wantOK: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := (&TeamSpend{Flavors: tc.flavors}).QuotaUsed()
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("QuotaUsed() = %g, %v; want %g, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
	if _, ok := (*TeamSpend)(nil).QuotaUsed(); ok {
		t.Error("QuotaUsed() of no spend is ok")
	}
}

func TestEfficiency(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	cases := map[string]struct {
		spend    TeamSpend
		want     float64
		wantOK   bool
		wantUtil float64
	}{
		"no fleet figures":     {spend: TeamSpend{GPUSeconds: 3600}},
		"nothing measured":     {spend: TeamSpend{GPUSeconds: 3600, IdleGPUSeconds: n(0), UsedGPUSeconds: n(0), MeasuredGPUSeconds: n(0)}},
		"nothing held":         {spend: TeamSpend{IdleGPUSeconds: n(0), UsedGPUSeconds: n(0), MeasuredGPUSeconds: n(10)}, wantUtil: 0},
		"a quarter idle":       {spend: TeamSpend{GPUSeconds: 4000, IdleGPUSeconds: n(1000), UsedGPUSeconds: n(1200), MeasuredGPUSeconds: n(4000)}, want: 0.75, wantOK: true, wantUtil: 0.3},
		"idle beyond the held": {spend: TeamSpend{GPUSeconds: 100, IdleGPUSeconds: n(150), UsedGPUSeconds: n(0), MeasuredGPUSeconds: n(150)}, want: 0, wantOK: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := tc.spend.Efficiency()
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("Efficiency() = %g, %v; want %g, %v", got, ok, tc.want, tc.wantOK)
			}
			if util, _ := tc.spend.MeanUtilization(); util != tc.wantUtil {
				t.Errorf("MeanUtilization() = %g, want %g", util, tc.wantUtil)
			}
		})
	}
}
