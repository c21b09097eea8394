// Package testenv opens, for tests of several packages, what they open
// alike: a data directory's store (DB), the tiny model's engine (Engine)
// and an engine with a text tier (NewEnv), each closed at the test's end.
// Imported by _test.go files only.
package testenv
