package fleet_test

import (
	"time"

	"chamber.dev/chamber/fleet"
)

// start is the fake clock's start in every test.
var start = time.Date(2026, 11, 15, 12, 0, 0, 0, time.UTC)

// stateLetters shows a node's GPUs one letter each: f free, b busy, i idle,
// u unhealthy, x isolated.
func stateLetters(s *fleet.Snapshot, node string) string {
	letters := map[fleet.State]byte{fleet.Free: 'f', fleet.Busy: 'b', fleet.Idle: 'i', fleet.Unhealthy: 'u', fleet.Isolated: 'x'}
	var out []byte
	for _, g := range s.GPUs {
		if g.Node == node {
			out = append(out, letters[g.State])
		}
	}
	return string(out)
}
