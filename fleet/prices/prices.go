// Package prices finds what a GPU-hour on a node costs from what the node says of
// itself: its cloud provider (the providerID's scheme, else the provider's labels),
// its instance type, region and capacity type (on-demand, spot, reserved).
//
// The price of an instance comes from a table: the rows shipped in the binary
// (cloud.csv: list on-demand prices of the GPU instances of AWS, GCP and Azure in
// each provider's reference region, each with its source and the date it was known;
// to be checked and overridden, never a bill) and the user's rows, which win. A GPU-hour
// is the instance's price over its GPUs, times the spot or reserved factor when the
// node is sold so. A node the table does not price is priced by its GPUPool
// (spec.prices), which the fleet model decides; this package imports no scheduler.
package prices

import (
	"bytes"
	_ "embed"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Providers as the table names them.
const (
	AWS   = "aws"
	GCP   = "gcp"
	Azure = "azure"
)

// Providers are the providers the table may name, in the order errors list them.
var Providers = []string{AWS, GCP, Azure}

// AnyRegion in a row's region prices the instance type in every region the table
// has no row of its own for: the provider's reference region price.
const AnyRegion = "*"

// Currency is the one currency of the table.
const Currency = "USD"

// Columns are the table's columns, in order. The last, note, may be left out.
var Columns = []string{"provider", "instance_type", "gpus", "gpu_model", "region",
	"price_per_instance_hour", "currency", "source", "date", "note"}

// Row is the on-demand price of one instance type in one region.
type Row struct {
	Provider     string
	InstanceType string
	GPUs         int
	// GPUModel names the instance's GPUs for the reader (H100-80GB); the node's own
	// product label names its model in the fleet.
	GPUModel string
	// Region is the provider's region name, or AnyRegion.
	Region string
	// PerInstanceHour is the on-demand price of the whole instance for an hour, in
	// Currency.
	PerInstanceHour float64
	Currency        string
	// Source is the public page the price was read from; Date when it was known
	// (YYYY-MM or YYYY-MM-DD), not when the table was written.
	Source string
	Date   string
	Note   string
	// Line is the row's line in its file.
	Line int
}

// PerGPUHour is the on-demand price of one of the instance's GPUs for an hour.
func (r Row) PerGPUHour() float64 { return r.PerInstanceHour / float64(r.GPUs) }

//go:embed cloud.csv
var cloudCSV []byte

// ShippedFile names the shipped table in errors and in the docs.
const ShippedFile = "fleet/prices/cloud.csv"

var shipped = sync.OnceValue(func() []Row {
	rows, err := Parse(ShippedFile, cloudCSV)
	if err != nil {
		panic(err) // TestShipped keeps it parseable
	}
	return rows
})

// Shipped is the table shipped in the binary.
func Shipped() []Row { return slices.Clone(shipped()) }

// Parse reads a price table in CSV: a header of Columns, then a row per instance type
// and region. Lines starting with # are comments. The error names the file, the line
// and what to fix.
func Parse(name string, data []byte) ([]Row, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.Comment = '#'
	r.FieldsPerRecord = -1
	r.TrimLeadingSpace = true
	header, err := r.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("%s: empty: the first line must be the header %s", name, strings.Join(Columns, ","))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if !slices.Equal(header, Columns) && !slices.Equal(header, Columns[:len(Columns)-1]) {
		line, _ := r.FieldPos(0)
		return nil, fmt.Errorf("%s:%d: the header must be %s (note may be left out), got %s",
			name, line, strings.Join(Columns, ","), strings.Join(header, ","))
	}
	var rows []Row
	seen := map[key]int{}
	for {
		rec, err := r.Read()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		line, _ := r.FieldPos(0)
		row, err := parseRow(rec, len(header))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		row.Line = line
		k := keyOf(row.Provider, row.InstanceType, row.Region)
		if first, ok := seen[k]; ok {
			return nil, fmt.Errorf("%s:%d: %s %s in region %s is priced on line %d already: keep one of them",
				name, line, row.Provider, row.InstanceType, row.Region, first)
		}
		seen[k] = line
		rows = append(rows, row)
	}
}

func parseRow(rec []string, columns int) (Row, error) {
	if len(rec) != columns {
		return Row{}, fmt.Errorf("%d columns where the header has %d (%s); quote a value that holds a comma",
			len(rec), columns, strings.Join(Columns[:columns], ","))
	}
	for i := range rec {
		rec[i] = strings.TrimSpace(rec[i])
	}
	row := Row{Provider: rec[0], InstanceType: rec[1], GPUModel: rec[3], Region: rec[4],
		Currency: rec[6], Source: rec[7], Date: rec[8]}
	if columns > 9 {
		row.Note = rec[9]
	}
	if !slices.Contains(Providers, row.Provider) {
		return Row{}, fmt.Errorf("provider %q is not one of %s", row.Provider, strings.Join(Providers, ", "))
	}
	if row.InstanceType == "" {
		return Row{}, errors.New("instance_type is empty: name the instance type as the node's node.kubernetes.io/instance-type label has it")
	}
	gpus, err := strconv.Atoi(rec[2])
	if err != nil || gpus < 1 {
		return Row{}, fmt.Errorf("gpus %q is not a whole number of GPUs of at least 1", rec[2])
	}
	row.GPUs = gpus
	if row.Region == "" {
		return Row{}, fmt.Errorf("region is empty: name the region (us-east-1) or write %s for every region without a row of its own", AnyRegion)
	}
	price, err := strconv.ParseFloat(rec[5], 64)
	if err != nil || !(price > 0) || price > 1e6 {
		return Row{}, fmt.Errorf("price_per_instance_hour %q is not a price: a positive decimal such as 55.04, for the whole instance", rec[5])
	}
	row.PerInstanceHour = price
	if row.Currency != Currency {
		return Row{}, fmt.Errorf("currency %q: the table is in %s only, the currency of the shipped prices", row.Currency, Currency)
	}
	if row.Date != "" && !validDate(row.Date) {
		return Row{}, fmt.Errorf("date %q is not YYYY-MM or YYYY-MM-DD", row.Date)
	}
	return row, nil
}

func validDate(s string) bool {
	_, err := time.Parse("2006-01-02", s)
	if err != nil {
		_, err = time.Parse("2006-01", s)
	}
	return err == nil
}

// key looks a row up: instance types match whatever their case (Azure's labels keep
// the API's Standard_ND96isr_H100_v5).
type key struct{ provider, instanceType, region string }

func keyOf(provider, instanceType, region string) key {
	return key{provider, strings.ToLower(instanceType), strings.ToLower(region)}
}
