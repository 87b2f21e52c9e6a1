// Package traces holds the GPU cluster traces the simulator ships with (see README.md
// for their sources and licenses), embedded so that `chamber sim` and `chamber demo`
// run from any folder of a fresh clone.
package traces

import _ "embed"

// PhillyWeekName is how reports name the embedded Philly week.
const PhillyWeekName = "philly_week.csv (embedded; Microsoft Philly, Jeon et al., USENIX ATC 2019, CC BY 4.0)"

// PhillyWeek is one week of the Microsoft Philly trace.
//
//go:embed philly_week.csv
var PhillyWeek []byte
