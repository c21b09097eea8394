// Package stats holds the small summary statistics the benchmarks report.
package stats
