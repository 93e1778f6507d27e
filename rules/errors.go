package rules

import (
	"errors"
	"fmt"
)

// FieldError is one problem in a [Config]. Path locates the field the way it
// is written in the config file ("domains[0].rules[1].period"), and Msg
// names the offending value. Its Error text, "path: message", is stable
// enough for operators to grep for.
type FieldError struct {
	Path string
	Msg  string
}

// Error returns "path: message".
func (e *FieldError) Error() string {
	return e.Path + ": " + e.Msg
}

// problems collects every FieldError found while compiling, so that one run
// reports them all.
type problems struct {
	list []error
}

func (p *problems) add(path, format string, args ...any) {
	p.list = append(p.list, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (p *problems) err() error {
	return errors.Join(p.list...)
}
