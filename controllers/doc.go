// Package controllers is where Chamber's controllers live, one package each (pool,
// team, inventory, admission, isolation, idlereclaim), wired by a single list in this
// package so that what runs is found in one file.
package controllers
