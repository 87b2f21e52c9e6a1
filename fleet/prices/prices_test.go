package prices

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

const header = "provider,instance_type,gpus,gpu_model,region,price_per_instance_hour,currency,source,date,note\n"

// TestShipped keeps the shipped table parseable, sourced and dated, and covers the
// GPU instance families the docs name.
func TestShipped(t *testing.T) {
	rows := Shipped()
	if len(rows) == 0 {
		t.Fatal("the shipped table is empty")
	}
	have := map[string]bool{}
	for _, r := range rows {
		if !strings.HasPrefix(r.Source, "https://") || r.Date == "" {
			t.Errorf("%s:%d: %s/%s has no source or date", ShippedFile, r.Line, r.Provider, r.InstanceType)
		}
		if r.Region != AnyRegion {
			t.Errorf("%s:%d: %s/%s: shipped rows price the reference region (%s)", ShippedFile, r.Line, r.Provider, r.InstanceType, AnyRegion)
		}
		have[r.Provider+"/"+r.InstanceType] = true
	}
	for _, want := range []string{
		"aws/p5.48xlarge", "aws/p5en.48xlarge", "aws/p4d.24xlarge", "aws/p4de.24xlarge", "aws/g6.xlarge", "aws/g6e.xlarge", "aws/p6-b200.48xlarge",
		"gcp/a3-highgpu-8g", "gcp/a2-highgpu-8g", "gcp/a2-ultragpu-8g", "gcp/g2-standard-4",
		"azure/Standard_ND96isr_H100_v5", "azure/Standard_ND96isr_H200_v5", "azure/Standard_ND96asr_v4", "azure/Standard_ND96amsr_A100_v4", "azure/Standard_NC24ads_A100_v4", "azure/Standard_NC40ads_H100_v5",
	} {
		if !have[want] {
			t.Errorf("the shipped table has no %s", want)
		}
	}
}

func TestFind(t *testing.T) {
	override := mustParse(t, header+
		"aws,p5.48xlarge,8,H100-80GB,*,40,USD,,2026-01,negotiated\n"+
		"gcp,a3-highgpu-8g,8,H100-80GB,europe-west4,96,USD,,,\n")
	table := New(override, Factors{Spot: 0.5, Reserved: 0.75})
	p5Override := 40.0 / 8
	a3 := 88.49 / 8
	nd := 98.32 / 8
	cases := map[string]struct {
		providerID string
		labels     map[string]string
		want       Price
		wantMiss   string
	}{
		"aws by providerID, the override over the shipped row": {
			providerID: "aws:///us-east-1a/i-0123",
			labels:     map[string]string{LabelInstanceType: "p5.48xlarge", LabelRegion: "us-east-1"},
			want:       Price{PerGPUHour: p5Override, Source: "override:aws/p5.48xlarge"},
		},
		"aws shipped row, Karpenter spot": {
			providerID: "aws:///us-west-2b/i-0456",
			labels:     map[string]string{LabelInstanceType: "p4d.24xlarge", LabelKarpenterCapacity: "spot"},
			want:       Price{PerGPUHour: 21.96 / 8 * 0.5, Source: "table:aws/p4d.24xlarge/spot"},
		},
		"aws by EKS labels, capacity block is reserved, beta label": {
			labels: map[string]string{LabelInstanceTypeBeta: "g6.xlarge", LabelEKSCapacity: "CAPACITY_BLOCK"},
			want:   Price{PerGPUHour: 0.8048 * 0.75, Source: "table:aws/g6.xlarge/reserved"},
		},
		"gcp reference row outside its region's own": {
			providerID: "gce://project/us-central1-a/node-1",
			labels:     map[string]string{LabelInstanceType: "a3-highgpu-8g", LabelRegion: "us-central1"},
			want:       Price{PerGPUHour: a3, Source: "table:gcp/a3-highgpu-8g"},
		},
		"gcp region's own row": {
			providerID: "gce://project/europe-west4-a/node-1",
			labels:     map[string]string{LabelInstanceType: "a3-highgpu-8g", LabelRegion: "europe-west4"},
			want:       Price{PerGPUHour: 12, Source: "override:gcp/a3-highgpu-8g"},
		},
		"gcp spot by label, provider by label": {
			labels: map[string]string{LabelInstanceType: "a3-highgpu-8g", LabelGKESpot: "true"},
			want:   Price{PerGPUHour: a3 * 0.5, Source: "table:gcp/a3-highgpu-8g/spot"},
		},
		"gcp spot by provisioning": {
			providerID: "gce://p/z/n",
			labels:     map[string]string{LabelInstanceType: "g2-standard-4", LabelGKEProvisioning: "spot"},
			want:       Price{PerGPUHour: 0.71 * 0.5, Source: "table:gcp/g2-standard-4/spot"},
		},
		"azure, instance type in another case": {
			providerID: "azure:///subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachineScaleSets/gpu/virtualMachines/0",
			labels:     map[string]string{LabelInstanceType: "standard_nd96isr_h100_v5", LabelRegion: "eastus"},
			want:       Price{PerGPUHour: nd, Source: "table:azure/Standard_ND96isr_H100_v5"},
		},
		"azure spot": {
			labels: map[string]string{LabelInstanceType: "Standard_ND96isr_H100_v5", LabelAKSPriority: "spot", "kubernetes.azure.com/agentpool": "gpu"},
			want:   Price{PerGPUHour: nd * 0.5, Source: "table:azure/Standard_ND96isr_H100_v5/spot"},
		},
		"no instance type label": {
			providerID: "aws:///us-east-1a/i-0123",
			labels:     map[string]string{LabelRegion: "us-east-1"},
			wantMiss:   "no node.kubernetes.io/instance-type label",
		},
		"unknown instance type": {
			providerID: "aws:///us-east-1a/i-0123",
			labels:     map[string]string{LabelInstanceType: "m7i.large"},
			wantMiss:   "aws/m7i.large is not in the price table",
		},
		"on-premises": {
			providerID: "kind://docker/kind/node",
			labels:     map[string]string{LabelInstanceType: "dgx-h100"},
			wantMiss:   "no cloud provider (providerID aws://, gce:// or azure://, or the provider's labels)",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, miss := table.Find(InstanceOf(tc.providerID, tc.labels))
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
				t.Errorf("price (-want +got):\n%s", diff)
			}
			if miss != tc.wantMiss {
				t.Errorf("miss = %q, want %q", miss, tc.wantMiss)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	cases := map[string]struct {
		data    string
		wantErr string
	}{
		"empty":       {"", "prices.csv: empty: the first line must be the header provider,instance_type,"},
		"bad header":  {"provider,type\n", "prices.csv:1: the header must be provider,instance_type,gpus,"},
		"few columns": {header + "aws,p5.48xlarge,8\n", "prices.csv:2: 3 columns where the header has 10"},
		"provider":    {header + "amazon,p5.48xlarge,8,H100,*,55,USD,,,\n", `prices.csv:2: provider "amazon" is not one of aws, gcp, azure`},
		"no type":     {header + "aws,,8,H100,*,55,USD,,,\n", "prices.csv:2: instance_type is empty"},
		"gpus":        {header + "aws,p5.48xlarge,eight,H100,*,55,USD,,,\n", `prices.csv:2: gpus "eight" is not a whole number`},
		"no region":   {header + "aws,p5.48xlarge,8,H100,,55,USD,,,\n", "prices.csv:2: region is empty"},
		"price":       {header + "# a comment\naws,p5.48xlarge,8,H100,*,$55,USD,,,\n", `prices.csv:3: price_per_instance_hour "$55" is not a price`},
		"zero price":  {header + "aws,p5.48xlarge,8,H100,*,0,USD,,,\n", `price_per_instance_hour "0" is not a price`},
		"currency":    {header + "aws,p5.48xlarge,8,H100,*,55,EUR,,,\n", `prices.csv:2: currency "EUR": the table is in USD only`},
		"date":        {header + "aws,p5.48xlarge,8,H100,*,55,USD,,June 2025,\n", `prices.csv:2: date "June 2025" is not YYYY-MM or YYYY-MM-DD`},
		"twice": {header + "aws,p5.48xlarge,8,H100,*,55,USD,,,\ngcp,a3-highgpu-8g,8,H100,*,88,USD,,,\naws,P5.48xlarge,8,H100,*,50,USD,,,\n",
			"prices.csv:4: aws P5.48xlarge in region * is priced on line 2 already"},
		"quote": {header + "aws,\"p5,8,H100,*,55,USD,,,\n", "prices.csv: parse error on line 2"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse("prices.csv", []byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Parse() = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

func TestParseWithoutNote(t *testing.T) {
	rows := mustParse(t, strings.TrimSuffix(header, ",note\n")+"\n"+
		`azure,Standard_NC24ads_A100_v4,1,A100-80GB,eastus, 3.673 ,USD,"https://azure.microsoft.com/pricing/",2024-06-01`+"\n")
	want := []Row{{Provider: Azure, InstanceType: "Standard_NC24ads_A100_v4", GPUs: 1, GPUModel: "A100-80GB", Region: "eastus",
		PerInstanceHour: 3.673, Currency: "USD", Source: "https://azure.microsoft.com/pricing/", Date: "2024-06-01", Line: 2}}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.csv")
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(good, []byte(header+"aws,p5.48xlarge,8,H100,*,48,USD,,,\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(header+"aws,p5.48xlarge,8,H100,*,48\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	table, err := Load(good, DefaultFactors())
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := table.Find(Instance{Provider: AWS, Type: "p5.48xlarge"}); got.PerGPUHour != 6 || got.Source != "override:aws/p5.48xlarge" {
		t.Errorf("the override does not win: %+v", got)
	}
	if _, err := Load(bad, DefaultFactors()); err == nil || !strings.Contains(err.Error(), bad+":2: 6 columns where the header has 10") {
		t.Errorf("Load(bad) = %v, want the file, line and column count", err)
	}
	if _, err := Load(filepath.Join(dir, "none.csv"), DefaultFactors()); err == nil || !strings.Contains(err.Error(), "none.csv") {
		t.Errorf("Load(missing) = %v, want the file named", err)
	}
	if _, err := Load("", Factors{Spot: 0, Reserved: 0.6}); err == nil || !strings.Contains(err.Error(), "spot price factor must be above 0") {
		t.Errorf("Load(spot 0) = %v, want the factor named", err)
	}
}

func TestPurchase(t *testing.T) {
	cases := map[string]struct {
		purchase Purchase
		want     float64
		wantErr  string
	}{
		// The docs' worked example (docs/concepts/prices.md).
		"docs example": {Purchase{PricePerGPU: 30000, Years: 4, PowerKW: 1.2, PowerPrice: 0.10}, 30000/(4*8766.0) + 0.12, ""},
		"no power":     {Purchase{PricePerGPU: 8766, Years: 1}, 1, ""},
		"no years":     {Purchase{PricePerGPU: 30000}, 0, "the years in service must be positive"},
		"negative":     {Purchase{PricePerGPU: -1, Years: 1}, 0, "purchase price per GPU must not be negative"},
		"NaN power":    {Purchase{Years: 1, PowerKW: math.NaN()}, 0, "power draw per GPU (kW) must not be negative"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := tc.purchase.PerGPUHour()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("PerGPUHour() error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("PerGPUHour() = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	// The docs round it: $0.9756 a GPU-hour.
	got, _ := Purchase{PricePerGPU: 30000, Years: 4, PowerKW: 1.2, PowerPrice: 0.10}.PerGPUHour()
	if math.Round(got*10000)/10000 != 0.9756 {
		t.Errorf("the docs' example is %v, the docs say 0.9756", got)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(header + "aws,p5.48xlarge,8,H100,*,55.04,USD,https://aws.amazon.com/,2025-06,\n"))
	f.Add([]byte(header + "aws,\"p5\n"))
	f.Add(cloudCSV)
	f.Fuzz(func(t *testing.T, data []byte) {
		rows, err := Parse("fuzz.csv", data)
		if err != nil {
			return
		}
		for _, r := range rows {
			if !(r.PerGPUHour() > 0) || r.GPUs < 1 || r.InstanceType == "" || r.Region == "" {
				t.Errorf("accepted a row that prices nothing: %+v", r)
			}
		}
	})
}

func mustParse(t *testing.T, data string) []Row {
	t.Helper()
	rows, err := Parse("test.csv", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return rows
}
