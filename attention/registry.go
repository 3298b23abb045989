package attention

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/polysketch/polysketch/internal/field"
)

// The registry: every mechanism registers an Entry from its own file, and
// everything outside the package (the model, checkpoints, the command line,
// the benchmarks) learns what mechanisms exist and what they need from it,
// never by switching on names.

// Setup is what the caller decides for every mechanism alike.
type Setup struct {
	Causal bool   // position i sees positions ≤ i only
	Seed   uint64 // seed of the mechanism's random draws (the model derives one per layer)
	// HeadSize is h, the size of each head. Mechanisms whose parameters
	// or random draws depend on it (learned sketches, random features,
	// hash hyperplanes) make them in New, so that Params lists them
	// before the first Forward, for an optimizer or a checkpoint to load
	// into. 0 leaves them to the first Forward.
	HeadSize int
	// Heads is H, the heads of the [B,H,N,h] inputs, for mechanisms with
	// per-head parameters (a learned temperature or mix), which New then
	// makes; 0 leaves them to the first Forward.
	Heads int
}

// headSized is implemented by the mechanisms that make parameters or
// random draws for the head size; New calls it with Setup.HeadSize.
type headSized interface {
	setHeadSize(h int)
}

// Config is the configuration of one mechanism: a struct value of the
// mechanism's own type (PolysketchConfig, FlashConfig, …). Its exported
// fields are the mechanism's options; each carries a `json:"name"` tag,
// which names the option in config.json, in specs and (with dashes for
// underscores) on the command line, and a `help:"…"` tag.
type Config interface {
	// Mechanism returns the registry name of the mechanism.
	Mechanism() string
	// Validate reports every invalid option, one line each, saying how
	// to fix it.
	Validate() error
}

// Properties say what a mechanism is, for the model, the tools and the
// table of mechanisms in docs/attention.md.
type Properties struct {
	Linear       bool // time and memory linear in N (else quadratic time)
	NormalizeQK  bool // the model puts a LayerNorm on q and k: the weights have no scale of their own
	Trainable    bool // may own parameters (the Mechanism then implements Trainable)
	ContextLimit bool // its decoder keeps a KV cache, bounded by the context trained on
	Recurrent    bool // its decoder keeps a state of constant size
}

// Entry registers a mechanism.
type Entry struct {
	Name    string // the registry name, as --attention takes it
	Summary string // what it computes, in a few words
	Cost    string // time per head in N, e.g. "O(N²·h)" or "O(N·r²·h)"
	Order   int    // position in tables: smaller first
	Properties
	Default func() Config                          // the defaults
	New     func(Config, Setup) (Mechanism, error) // called with a valid config of the entry's type
}

var registry = map[string]Entry{}

// Register adds a mechanism to the registry; mechanisms call it from an
// init function. It panics on a duplicate name or an incomplete entry.
func Register(e Entry) {
	switch {
	case e.Name == "" || e.Default == nil || e.New == nil:
		panic("attention.Register: an entry needs Name, Default and New")
	case registry[e.Name].Name != "":
		panic("attention.Register: " + e.Name + " registered twice")
	case e.Default().Mechanism() != e.Name:
		panic("attention.Register: " + e.Name + "'s default config names " + e.Default().Mechanism())
	}
	registry[e.Name] = e
}

// Entries returns every registered mechanism, in table order.
func Entries() []Entry {
	es := make([]Entry, 0, len(registry))
	for _, e := range registry {
		es = append(es, e)
	}
	sort.Slice(es, func(i, j int) bool {
		if es[i].Order != es[j].Order {
			return es[i].Order < es[j].Order
		}
		return es[i].Name < es[j].Name
	})
	return es
}

// Names returns the names of every registered mechanism, in table order.
func Names() []string {
	var names []string
	for _, e := range Entries() {
		names = append(names, e.Name)
	}
	return names
}

// Lookup returns the entry of the named mechanism.
func Lookup(name string) (Entry, error) {
	e, ok := registry[name]
	if !ok {
		return Entry{}, fmt.Errorf("unknown attention mechanism %q: use one of %s", name, strings.Join(Names(), ", "))
	}
	return e, nil
}

// DefaultConfig returns the default configuration of the named mechanism.
func DefaultConfig(name string) (Config, error) {
	e, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	return e.Default(), nil
}

// PropertiesOf returns the properties of cfg's mechanism, with those that
// an option of cfg decides (whether the model normalizes q and k) as cfg
// has them.
func PropertiesOf(cfg Config) Properties {
	e, err := Lookup(cfg.Mechanism())
	if err != nil {
		panic("attention.PropertiesOf: " + err.Error())
	}
	p := e.Properties
	if n, ok := cfg.(qkNormer); ok {
		p.NormalizeQK = n.normalizeQK()
	}
	return p
}

// A qkNormer is a Config with an option that decides
// Properties.NormalizeQK (the entry's value is the default's).
type qkNormer interface {
	normalizeQK() bool
}

// New returns the mechanism cfg describes, after validating cfg.
func New(cfg Config, s Setup) (Mechanism, error) {
	if cfg == nil {
		return nil, errors.New("no attention mechanism configured")
	}
	e, err := Lookup(cfg.Mechanism())
	if err != nil {
		return nil, err
	}
	if reflect.TypeOf(cfg) != reflect.TypeOf(e.Default()) {
		return nil, fmt.Errorf("%s: config of type %T, want %T", e.Name, cfg, e.Default())
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s attention: %w", e.Name, err)
	}
	if s.HeadSize < 0 {
		return nil, fmt.Errorf("%s attention: head size %d: must be positive, or 0 to take it from the first Forward", e.Name, s.HeadSize)
	}
	m, err := e.New(cfg, s)
	if err != nil {
		return nil, err
	}
	if hs, ok := m.(headSized); ok && s.HeadSize > 0 {
		hs.setHeadSize(s.HeadSize)
	}
	return m, nil
}

// Option describes one option of a mechanism's Config.
type Option struct {
	Name    string // as in config.json and specs: "sketch_size"
	Flag    string // as on the command line: "sketch-size"
	Help    string
	Default string // the default value, formatted as a flag takes it
	Bool    bool   // a boolean option (--local is --local=true)
	index   int
}

// OptionsOf returns the options of cfg's type, in field order, with cfg's
// values as their defaults.
func OptionsOf(cfg Config) []Option {
	v := reflect.ValueOf(cfg)
	t := v.Type()
	var opts []Option
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		opts = append(opts, Option{
			Name: name, Flag: strings.ReplaceAll(name, "_", "-"), Help: f.Tag.Get("help"),
			Default: formatValue(v.Field(i)), Bool: f.Type.Kind() == reflect.Bool, index: i,
		})
	}
	return opts
}

// optionList returns the end of a message that lists cfg's options,
// "its options are %s, %s", and the options' names to format it with.
func optionList(cfg Config) (string, []any) {
	opts := OptionsOf(cfg)
	if len(opts) == 0 {
		return "it has no options", nil
	}
	names := make([]any, len(opts))
	for i, o := range opts {
		names[i] = field.Name(o.Name)
	}
	return "its options are " + strings.Repeat("%s, ", len(opts)-1) + "%s", names
}

// Set returns cfg with the option named name (a flag or JSON name) set
// to value, parsed as the option's type. An option that cfg's mechanism
// does not have is an error naming the ones it has.
func Set(cfg Config, name, value string) (Config, error) {
	name = strings.ReplaceAll(strings.TrimLeft(name, "-"), "-", "_")
	for _, o := range OptionsOf(cfg) {
		if o.Name != name {
			continue
		}
		v := reflect.New(reflect.TypeOf(cfg)).Elem()
		v.Set(reflect.ValueOf(cfg))
		if err := parseValue(v.Field(o.index), value); err != nil {
			return cfg, field.Errorf("%s option %s=%s: %w", cfg.Mechanism(), field.Name(o.Name), value, err)
		}
		return v.Interface().(Config), nil
	}
	list, names := optionList(cfg)
	return cfg, field.Errorf("%s is no option of %s attention: "+list, append([]any{field.Name(name), cfg.Mechanism()}, names...)...)
}

// ParseSpec parses a mechanism spec: a name, then options as
// ":key=value" ("polysketch:learned=false:sketch-size=64"), each key an
// option's flag or JSON name, applied over the mechanism's defaults. A
// boolean option may be given without a value ("polysketch:remat").
func ParseSpec(spec string) (Config, error) {
	cfg, err := ParseSpecFrom(spec, nil)
	if err != nil {
		return nil, fmt.Errorf("spec %q: %w", spec, err)
	}
	return cfg, nil
}

// ParseSpecFrom parses spec as ParseSpec does, but applies its options
// over start(d), where d is the default configuration of the mechanism
// spec names: start is the caller's own starting point for a mechanism
// (other defaults, options given elsewhere). A nil start is the identity.
// The result is validated. Errors do not repeat spec: callers say where
// it came from.
func ParseSpecFrom(spec string, start func(Config) (Config, error)) (Config, error) {
	name, opts := splitSpec(spec)
	cfg, err := DefaultConfig(name)
	if err != nil {
		return nil, err
	}
	if start != nil {
		if cfg, err = start(cfg); err != nil {
			return nil, err
		}
	}
	if cfg, err = SetSpec(cfg, opts); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s attention: %w", cfg.Mechanism(), err)
	}
	return cfg, nil
}

// LookupSpec returns the entry of the mechanism that spec names.
func LookupSpec(spec string) (Entry, error) {
	name, _ := splitSpec(spec)
	return Lookup(name)
}

// splitSpec is the one place that takes a spec apart: its name, and the
// options after the first colon.
func splitSpec(spec string) (name, opts string) {
	name, opts, _ = strings.Cut(strings.TrimSpace(spec), ":")
	return name, opts
}

// SetSpec returns cfg with the options of a spec's tail set
// ("learned=false:sketch-size=64", without the name; a boolean option may
// come without its value). It does not validate the result.
func SetSpec(cfg Config, opts string) (Config, error) {
	if opts == "" {
		return cfg, nil
	}
	for _, p := range strings.Split(opts, ":") {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			v = "true"
		}
		var err error
		if cfg, err = Set(cfg, k, v); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// Spec formats cfg as a spec ParseSpec reads back: the name, then every
// option that differs from the mechanism's default.
func Spec(cfg Config) string {
	var b strings.Builder
	b.WriteString(cfg.Mechanism())
	for _, o := range Changed(cfg) {
		fmt.Fprintf(&b, ":%s=%s", o.Flag, o.Default)
	}
	return b.String()
}

// Changed returns the options of cfg that differ from its mechanism's
// defaults, in field order, with cfg's values as their Default.
func Changed(cfg Config) []Option {
	var opts []Option
	def := OptionsOf(registry[cfg.Mechanism()].Default())
	for i, o := range OptionsOf(cfg) {
		if i < len(def) && def[i].Default == o.Default {
			continue
		}
		opts = append(opts, o)
	}
	return opts
}

// MarshalConfig returns cfg's options as a JSON object.
func MarshalConfig(cfg Config) ([]byte, error) { return json.Marshal(cfg) }

// UnmarshalConfig decodes the options of the named mechanism from a JSON
// object, over its defaults (options missing from the object keep their
// defaults). Unknown options are an error unless lenient is set, which
// reads configurations of the past that kept the options of every
// mechanism in one object.
func UnmarshalConfig(name string, data []byte, lenient bool) (Config, error) {
	def, err := DefaultConfig(name)
	if err != nil {
		return nil, err
	}
	v := reflect.New(reflect.TypeOf(def))
	v.Elem().Set(reflect.ValueOf(def))
	if lenient {
		var all map[string]json.RawMessage
		if err := json.Unmarshal(data, &all); err != nil {
			return nil, fmt.Errorf("%s options: %w", name, err)
		}
		known := map[string]json.RawMessage{}
		for _, o := range OptionsOf(def) {
			if raw, ok := all[o.Name]; ok {
				known[o.Name] = raw
			}
		}
		if data, err = json.Marshal(known); err != nil {
			return nil, err
		}
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v.Interface()); err != nil {
		list, names := optionList(def)
		return nil, field.Errorf("%s options: %w ("+list+")", append([]any{name, err}, names...)...)
	}
	return v.Elem().Interface().(Config), nil
}

func formatValue(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	}
	return fmt.Sprint(v.Interface())
}

func parseValue(v reflect.Value, s string) error {
	switch v.Kind() {
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return errors.New("want true or false")
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int64, reflect.Int32:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return errors.New("want an integer")
		}
		v.SetInt(n)
	case reflect.Uint64, reflect.Uint32, reflect.Uint:
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return errors.New("want a non-negative integer")
		}
		v.SetUint(n)
	case reflect.Float64, reflect.Float32:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return errors.New("want a finite number")
		}
		v.SetFloat(f)
	case reflect.String:
		v.SetString(s)
	default:
		panic("attention: option of unsupported type " + v.Type().String())
	}
	return nil
}
