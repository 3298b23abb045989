//go:build !race

package attention

const decodeRace = false
