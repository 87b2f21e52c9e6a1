package prices

import "fmt"

// HoursPerYear is a year of 365.25 days.
const HoursPerYear = 365.25 * 24

// Purchase is a GPU bought outright, for its amortized GPU-hour: what a pool of your
// own racks puts in spec.prices with kind Amortized.
type Purchase struct {
	// PricePerGPU is the purchase price of one GPU's share of its server (the GPU, the
	// host, its network), in the pool's currency.
	PricePerGPU float64
	// Years in service, over which the price is written off evenly.
	Years float64
	// PowerKW is the mean power one GPU's share draws, in kW, cooling included (the
	// server's draw over its GPUs, times the data centre's PUE).
	PowerKW float64
	// PowerPrice is the price of a kWh.
	PowerPrice float64
}

// PerGPUHour is the purchase written off over every hour of the years in service,
// plus an hour of power: PricePerGPU / (Years x HoursPerYear) + PowerKW x PowerPrice.
// Every hour counts, used or not: idle GPUs cost the same.
func (p Purchase) PerGPUHour() (float64, error) {
	switch {
	case !(p.PricePerGPU >= 0):
		return 0, fmt.Errorf("the purchase price per GPU must not be negative, got %v", p.PricePerGPU)
	case !(p.Years > 0):
		return 0, fmt.Errorf("the years in service must be positive, got %v", p.Years)
	case !(p.PowerKW >= 0):
		return 0, fmt.Errorf("the power draw per GPU (kW) must not be negative, got %v", p.PowerKW)
	case !(p.PowerPrice >= 0):
		return 0, fmt.Errorf("the power price per kWh must not be negative, got %v", p.PowerPrice)
	}
	return p.PricePerGPU/(p.Years*HoursPerYear) + p.PowerKW*p.PowerPrice, nil
}
