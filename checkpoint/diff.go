package checkpoint

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
)

// Diff compares two configurations field by field, by their JSON form, and
// returns one line per difference, "name: a vs b", with nested fields named
// by their path ("optimizer.beta1"), in sorted order. Configurations that
// encode to the same JSON give none. It panics if a or b cannot be encoded
// as JSON, which configurations always can.
func Diff(a, b any) []string {
	var out []string
	for _, d := range Differences(a, b) {
		out = append(out, fmt.Sprintf("%s: %s vs %s", d.Path, d.A, d.B))
	}
	return out
}

// Difference is one field in which two configurations differ: its path,
// and its value on each side as JSON ("missing" where a side lacks it).
type Difference struct {
	Path string
	A, B string
}

// Differences is Diff as values, for callers that act on each field.
func Differences(a, b any) []Difference {
	var out []Difference
	diffValues("", toJSONValue(a), toJSONValue(b), &out)
	return out
}

func toJSONValue(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("checkpoint.Diff: %v", err))
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(fmt.Sprintf("checkpoint.Diff: %v", err))
	}
	return out
}

func diffValues(path string, a, b any, out *[]Difference) {
	ma, okA := a.(map[string]any)
	mb, okB := b.(map[string]any)
	if okA && okB {
		keys := make(map[string]bool)
		for k := range ma {
			keys[k] = true
		}
		for k := range mb {
			keys[k] = true
		}
		names := make([]string, 0, len(keys))
		for k := range keys {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			p := k
			if path != "" {
				p = path + "." + k
			}
			diffValues(p, field(ma, k), field(mb, k), out)
		}
		return
	}
	if !reflect.DeepEqual(a, b) {
		*out = append(*out, Difference{path, show(a), show(b)})
	}
}

// missing stands for a field one side does not have.
type missing struct{}

func field(m map[string]any, k string) any {
	if v, ok := m[k]; ok {
		return v
	}
	return missing{}
}

// show formats a JSON value as JSON, "missing" for an absent one.
func show(v any) string {
	if _, ok := v.(missing); ok {
		return "missing"
	}
	b, _ := json.Marshal(v)
	return string(b)
}
