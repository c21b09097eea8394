// Package config holds Options, what an OS is opened with (package
// memosrt's Open; memosrt.Options is an alias): the data directory, the
// models served, the engine, the slots and the budgets of every tier,
// their defaults (DefaultOptions, Options.WithDefaults) and their checks
// (Options.Validate). Every layer reads its part; none writes it after
// Open. Values, no state: safe to copy and share.
package config
