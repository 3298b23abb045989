// Package field writes errors about the fields of configurations so that
// each reader sees a field by its own name: the library by the field's
// JSON name ("sketch_size 0: must be positive"), a command line by the
// flag that sets it ("--sketch-size 0: must be positive").
package field

import (
	"fmt"
	"reflect"
	"strings"
)

// Name is a field named in an error message: its JSON name.
type Name string

// Error is an error whose message names fields (Errorf, Invalid).
type Error struct {
	format string
	args   []any
}

// Errorf formats an error as fmt.Errorf does, %w included; the arguments
// of type Name are the fields the message names, which In may rename.
func Errorf(format string, args ...any) error {
	return &Error{format: format, args: args}
}

// Invalid returns the error of field name holding value: "name value:
// reason", the value quoted if it is a string, the reason formatted from
// format and args.
func Invalid(name string, value any, format string, args ...any) error {
	verb := "%v"
	if reflect.ValueOf(value).Kind() == reflect.String {
		verb = "%q"
	}
	return Errorf("%s "+verb+": "+format, append([]any{Name(name), value}, args...)...)
}

func (e *Error) Error() string { return e.In(func(n string) string { return n }) }

// In returns the message with each field named as rename names it.
func (e *Error) In(rename func(field string) string) string {
	args := make([]any, len(e.args))
	for i, a := range e.args {
		if n, ok := a.(Name); ok {
			a = rename(string(n))
		}
		args[i] = a
	}
	return fmt.Errorf(e.format, args...).Error()
}

// Unwrap returns the errors the message wraps (%w), as fmt.Errorf would.
func (e *Error) Unwrap() []error {
	switch u := fmt.Errorf(e.format, e.args...).(type) {
	case interface{ Unwrap() error }:
		return []error{u.Unwrap()}
	case interface{ Unwrap() []error }:
		return u.Unwrap()
	}
	return nil
}

// Rename returns the message of err with every field that an *Error in
// it (wrapped or joined, at any depth) names as rename names it.
func Rename(err error, rename func(field string) string) string {
	msg := err.Error()
	walk(err, func(e *Error) {
		if lib, mine := e.Error(), e.In(rename); lib != mine {
			msg = strings.ReplaceAll(msg, lib, mine)
		}
	})
	return msg
}

// walk calls f with every *Error in err's tree, outer ones first.
func walk(err error, f func(*Error)) {
	if e, ok := err.(*Error); ok {
		f(e)
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		if inner := u.Unwrap(); inner != nil {
			walk(inner, f)
		}
	case interface{ Unwrap() []error }:
		for _, inner := range u.Unwrap() {
			walk(inner, f)
		}
	}
}
