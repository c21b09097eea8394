//go:build !linux

package testutil

import "os/exec"

// DieWithParent is a no-op outside Linux.
func DieWithParent(cmd *exec.Cmd) {}

// runAs is a no-op outside Linux.
func runAs(cmd *exec.Cmd, uid, gid uint32) {}
