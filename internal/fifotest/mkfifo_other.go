//go:build !unix

package fifotest

import "errors"

func mkfifo(string) error { return errors.New("no named pipes") }
