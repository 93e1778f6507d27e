package config

import (
	"fmt"
	"math"
	"reflect"

	"github.com/edgerate/edge/rules"
)

// sizeHook decodes a size (rules.Size) from a string with a unit ("64KiB",
// "1MiB") or a whole number of bytes, written as a YAML integer or a
// string of digits, naming the value when it is neither. A fraction is
// refused rather than truncated.
func sizeHook(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[rules.Size]() {
		return data, nil
	}
	v := reflect.ValueOf(data)
	switch from.Kind() {
	case reflect.String:
		s, err := rules.ParseSize(v.String())
		if err != nil {
			return nil, fmt.Errorf("%w, got %q", err, v.String())
		}
		return s, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rules.Size(v.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if v.Uint() > math.MaxInt64 {
			return nil, fmt.Errorf("is too large for a size, got %d", v.Uint())
		}
		return rules.Size(v.Uint()), nil
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); f == math.Trunc(f) && math.Abs(f) < 1<<63 {
			return rules.Size(f), nil
		}
		return nil, fmt.Errorf("must be a whole number of bytes, got %v", data)
	}
	return nil, fmt.Errorf("must be a size such as 64KiB or 1MiB, or a whole number of bytes, got %v", data)
}
