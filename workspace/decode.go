package workspace

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// FieldError is a problem with one field of the profile, named by its path
// (e.g. "credentials[0].secret.env").
type FieldError struct {
	Path string
	Err  error
}

func (e *FieldError) Error() string {
	if e.Path == "" {
		return e.Err.Error()
	}
	return e.Path + ": " + e.Err.Error()
}

func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(path string, format string, args ...any) *FieldError {
	return &FieldError{Path: path, Err: fmt.Errorf(format, args...)}
}

// decodeStrict decodes JSON into v (a pointer), rejecting unknown fields,
// duplicate keys, trailing data and wrong types, each with the path of the
// field. encoding/json reports unknown fields without a path and accepts
// duplicate keys (last wins), neither of which is acceptable for a security
// policy a person edits by hand.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := decodeValue(dec, reflect.ValueOf(v).Elem(), ""); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return &FieldError{Err: errors.New("unexpected data after the top-level object")}
	}
	return nil
}

func joinPath(base, field string) string {
	if base == "" {
		return field
	}
	return base + "." + field
}

func describe(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice:
		return "a list"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint16:
		return "a whole number"
	case reflect.Pointer:
		return describe(t.Elem())
	}
	return t.String()
}

func jsonKind(tok json.Token) string {
	switch tok := tok.(type) {
	case json.Delim:
		if tok == '{' {
			return "an object"
		}
		return "a list"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return "a value"
}

// closeToken reads the '}' or ']' that ends an object or list.
func closeToken(dec *json.Decoder, path string) error {
	if _, err := dec.Token(); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return &FieldError{Path: path, Err: fmt.Errorf("invalid JSON: %w", err)}
	}
	return nil
}

func decodeValue(dec *json.Decoder, v reflect.Value, path string) error {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return &FieldError{Path: path, Err: fmt.Errorf("invalid JSON: %w", err)}
	}
	if tok == nil { // null leaves the zero value, as if absent
		return nil
	}
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		v = v.Elem()
	}
	if u, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
		s, isString := tok.(string)
		if !isString {
			return fieldErr(path, "want a string, got %s", jsonKind(tok))
		}
		if err := u.UnmarshalText([]byte(s)); err != nil {
			return &FieldError{Path: path, Err: err}
		}
		return nil
	}
	wrongType := func() error {
		return fieldErr(path, "want %s, got %s", describe(v.Type()), jsonKind(tok))
	}
	switch v.Kind() {
	case reflect.Struct:
		if tok != json.Delim('{') {
			return wrongType()
		}
		fields := map[string]int{}
		var names []string
		for i := range v.NumField() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			if name != "" && name != "-" {
				fields[name] = i
				names = append(names, name)
			}
		}
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return &FieldError{Path: path, Err: fmt.Errorf("invalid JSON: %w", err)}
			}
			key := kt.(string)
			fp := joinPath(path, key)
			i, ok := fields[key]
			if !ok {
				return fieldErr(fp, "unknown field (known fields here: %s)", strings.Join(names, ", "))
			}
			if seen[key] {
				return fieldErr(fp, "field appears twice")
			}
			seen[key] = true
			if err := decodeValue(dec, v.Field(i), fp); err != nil {
				return err
			}
		}
		return closeToken(dec, path)
	case reflect.Map:
		if tok != json.Delim('{') {
			return wrongType()
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return &FieldError{Path: path, Err: fmt.Errorf("invalid JSON: %w", err)}
			}
			key := kt.(string)
			fp := fmt.Sprintf("%s[%q]", path, key)
			if v.MapIndex(reflect.ValueOf(key)).IsValid() {
				return fieldErr(fp, "key appears twice")
			}
			elem := reflect.New(v.Type().Elem()).Elem()
			if err := decodeValue(dec, elem, fp); err != nil {
				return err
			}
			v.SetMapIndex(reflect.ValueOf(key), elem)
		}
		return closeToken(dec, path)
	case reflect.Slice:
		if tok != json.Delim('[') {
			return wrongType()
		}
		v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		for i := 0; dec.More(); i++ {
			elem := reflect.New(v.Type().Elem()).Elem()
			if err := decodeValue(dec, elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
			v.Set(reflect.Append(v, elem))
		}
		return closeToken(dec, path)
	case reflect.String:
		s, ok := tok.(string)
		if !ok {
			return wrongType()
		}
		v.SetString(s)
	case reflect.Bool:
		b, ok := tok.(bool)
		if !ok {
			return wrongType()
		}
		v.SetBool(b)
	case reflect.Int:
		n, ok := tok.(json.Number)
		if !ok {
			return wrongType()
		}
		i, err := n.Int64()
		if err != nil || i < -1<<31 || i > 1<<31-1 {
			return fieldErr(path, "want a whole number, got %s", n)
		}
		v.SetInt(i)
	default:
		return fieldErr(path, "unsupported field type %s", v.Type())
	}
	return nil
}
