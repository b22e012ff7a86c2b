//go:build !linux

package rowengine

import "errors"

var errNoMappedBound = errors.New("only Linux reports and pages out a process's mapped file pages")

func residentFileBytes() (int64, error) { return 0, errNoMappedBound }

func pageOutMappings(string, int64) error { return errNoMappedBound }
