// Package testutil holds helpers that tests of several packages share.
package testutil
