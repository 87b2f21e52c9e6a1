package charts_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"chamber.dev/chamber/fleet/prices"
)

// TestPriceTable: prices.table reaches the controller as the --price-table file, which
// it reads as it was meant; a change of it rolls the controller. Without it, nothing of
// it is rendered.
func TestPriceTable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "prices.csv")
	table := strings.Join(prices.Columns, ",") + "\naws,p5.48xlarge,8,H100-80GB,*,40.00,USD,our contract,2026-01,savings plan\n"
	if err := os.WriteFile(file, []byte(table), 0o600); err != nil {
		t.Fatal(err)
	}
	objs := render(t, "--set-file", "prices.table="+file)
	cm := find(objs, "ConfigMap", "chamber-controller-prices")
	if cm == nil {
		t.Fatal("no price table ConfigMap rendered")
	}
	data, _, _ := unstructured.NestedString(cm.Object, "data", "prices.csv")
	rows, err := prices.Parse("prices.csv", []byte(data))
	if err != nil || len(rows) != 1 || rows[0].PerInstanceHour != 40 {
		t.Errorf("the controller reads %+v, %v from the chart's file %q", rows, err, data)
	}
	deploy := find(objs, "Deployment", "")
	if args := containerArgs(t, deploy); !slices.Contains(args, "--price-table=/etc/chamber/prices/prices.csv") {
		t.Errorf("controller args %v lack --price-table", args)
	}
	containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	mounts, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "volumeMounts")
	volumes, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "volumes")
	if len(mounts) == 0 || len(volumes) == 0 {
		t.Errorf("the price table is not mounted: mounts %v, volumes %v", mounts, volumes)
	}
	if sum, _, _ := unstructured.NestedString(deploy.Object, "spec", "template", "metadata", "annotations", "checksum/price-table"); sum == "" {
		t.Error("the controller's pods carry no checksum of the price table")
	}

	objs = render(t)
	if cm := find(objs, "ConfigMap", "chamber-controller-prices"); cm != nil {
		t.Error("a price table ConfigMap rendered without prices.table")
	}
	for _, arg := range containerArgs(t, find(objs, "Deployment", "")) {
		if strings.HasPrefix(arg, "--price-table") {
			t.Errorf("controller arg %s without prices.table", arg)
		}
	}
}
