// Package gate admits calls to a service until it closes, and lets the
// closer wait for the calls it admitted: until a deadline, then cancelling
// them (package memosrt's OS: every method is an admitted call, Close
// waits). Main type: Gate; Call and Do run a function as an admitted
// call. A Gate is safe for concurrent use.
package gate
