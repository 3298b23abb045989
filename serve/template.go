package serve

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ardanlabs/jinja"

	"github.com/polysketch/polysketch/data/tokenizer"
)

// chatTemplate is a model's own chat template (tokenizer_config.json's
// chat_template, in Jinja), with which /v1/chat/completions writes a
// conversation out as the model was trained to read it, as transformers'
// apply_chat_template does.
//
// A template comes with the model, not with a request, but it is code:
// rendering is bounded. Its macros may not call themselves, even through
// others (checkMacros; the engine has no depth limit, and a Go stack
// overflow cannot be recovered), range yields at most maxRange numbers (as
// in Jinja2's sandbox), and a render that runs past renderTimeout is
// answered with an error and disables the template, so that at most one
// render runs away.
type chatTemplate struct {
	t    *jinja.Template
	vars map[string]jinja.Value // bos_token, eos_token and the like
	// broken is set once a render ran past renderTimeout.
	broken atomic.Bool
}

const maxRange = 100_000

// renderTimeout bounds a render; a variable for tests.
var renderTimeout = 2 * time.Second

// newChatTemplate compiles the template of cfg, checks its macros, and
// renders a conversation of one user message with it, so that a template
// that cannot render any conversation is refused when the model loads.
func newChatTemplate(cfg *tokenizer.Config) (*chatTemplate, error) {
	if err := checkMacros(cfg.ChatTemplate); err != nil {
		return nil, fmt.Errorf("chat_template: %w", err)
	}
	t, err := jinja.Compile(cfg.ChatTemplate)
	if err != nil {
		return nil, fmt.Errorf("chat_template: %v", err)
	}
	c := &chatTemplate{t: t, vars: map[string]jinja.Value{
		"bos_token": jinja.NewString(cfg.BOSText),
		"eos_token": jinja.NewString(cfg.EOSText),
	}}
	for name, s := range cfg.Special {
		c.vars[name] = jinja.NewString(s)
	}
	if _, err := c.render([]chatMessage{{"user", "Hello"}}); err != nil {
		return nil, fmt.Errorf("chat_template: a conversation of one user message does not render: %s", err.Message)
	}
	return c, nil
}

// CheckChatTemplate reports whether the chat template of cfg, if it has
// one, is one a server takes (see Server.ReadyConfig): it compiles, its
// macros do not call themselves, and it renders a conversation of one
// user message. An import checks it, so that the template can be fixed
// before a checkpoint covers it with its checksums.
func CheckChatTemplate(cfg *tokenizer.Config) error {
	if cfg.ChatTemplate == "" {
		return nil
	}
	_, err := newChatTemplate(cfg)
	return err
}

// chatMessage is a message as a template reads it.
type chatMessage struct{ role, content string }

// render writes msgs out with the template and the generation prompt: the
// text the model continues. A template that raises an exception (a role
// it does not take, roles that do not alternate) gives a 400 with its
// message; any other failure a 500.
func (c *chatTemplate) render(msgs []chatMessage) (string, *apiError) {
	if c.broken.Load() {
		return "", errorf(http.StatusInternalServerError, "chat_template_error", "the model's chat template ran past %s on an earlier request and is disabled: fix chat_template in its tokenizer_config.json", renderTimeout)
	}
	list := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		d := jinja.NewDict()
		d.AsDict().Set("role", jinja.NewString(m.role))
		d.AsDict().Set("content", jinja.NewString(m.content))
		list[i] = d
	}
	var raised atomic.Pointer[string]
	vars := make(map[string]jinja.Value, len(c.vars)+4)
	for k, v := range c.vars {
		vars[k] = v
	}
	vars["messages"] = jinja.NewList(list)
	vars["add_generation_prompt"] = jinja.NewBool(true)
	vars["raise_exception"] = jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		msg := "raise_exception"
		if len(args) > 0 && args[0].IsString() {
			msg = args[0].AsString()
		} else if len(args) > 0 {
			msg = args[0].String()
		}
		raised.Store(&msg)
		return jinja.Undefined(), errors.New(msg)
	})
	vars["range"] = jinja.NewCallable("range", boundedRange)

	type result struct {
		text string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{err: fmt.Errorf("the template engine failed: %v", p)}
			}
		}()
		text, err := c.t.RenderValues(vars)
		done <- result{text, err}
	}()
	timer := time.NewTimer(renderTimeout)
	defer timer.Stop()
	select {
	case r := <-done:
		switch {
		case r.err == nil:
			return r.text, nil
		case raised.Load() != nil:
			return "", errorf(http.StatusBadRequest, "invalid_value", "the model's chat template refuses this conversation: %s", *raised.Load())
		}
		return "", errorf(http.StatusInternalServerError, "chat_template_error", "the model's chat template failed: %v", r.err)
	case <-timer.C:
		c.broken.Store(true)
		return "", errorf(http.StatusInternalServerError, "chat_template_error", "the model's chat template ran past %s: it is disabled until the server restarts; fix chat_template in its tokenizer_config.json", renderTimeout)
	}
}

// boundedRange is Jinja's range, of at most maxRange numbers.
func boundedRange(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	var start, stop, step int64 = 0, 0, 1
	n := make([]int64, len(args))
	for i, a := range args {
		if !a.IsInt() {
			return jinja.Undefined(), fmt.Errorf("range: argument %d is not an integer", i+1)
		}
		n[i] = a.AsInt()
	}
	switch len(n) {
	case 1:
		stop = n[0]
	case 2:
		start, stop = n[0], n[1]
	case 3:
		start, stop, step = n[0], n[1], n[2]
	default:
		return jinja.Undefined(), fmt.Errorf("range: want 1 to 3 arguments, got %d", len(args))
	}
	if step == 0 {
		return jinja.Undefined(), errors.New("range: step is zero")
	}
	var items []jinja.Value
	for i := start; step > 0 && i < stop || step < 0 && i > stop; i += step {
		if len(items) == maxRange {
			return jinja.Undefined(), fmt.Errorf("range: more than %d numbers", maxRange)
		}
		items = append(items, jinja.NewInt(i))
		if i > 0 && i+step < i || i < 0 && i+step > i {
			break // overflow
		}
	}
	return jinja.NewList(items), nil
}

// checkMacros refuses a template whose macros could call themselves,
// directly or through others: a macro's body may name only macros defined
// before it, a macro's name may only be called (never taken as a value,
// which could reach it again), and no name is defined twice. Jinja has no
// other way to loop without end.
func checkMacros(src string) error {
	tags, err := jinjaTags(src)
	if err != nil {
		return err
	}
	defs := map[string]int{} // macro name → its index in order of definition
	for _, tag := range tags {
		if name, ok := macroName(tag); ok {
			if _, dup := defs[name]; dup {
				return fmt.Errorf("macro %s is defined twice", name)
			}
			defs[name] = len(defs)
		}
	}
	var open []int // the indices of the macros whose bodies we are in
	count := 0
	for _, tag := range tags {
		name, isDef := macroName(tag)
		body := tag
		if isDef {
			body = tag[strings.Index(tag, name)+len(name):]
		}
		for _, id := range identifiers(body) {
			k, ok := defs[id.name]
			if !ok {
				continue
			}
			if !id.called {
				return fmt.Errorf("macro %s is used as a value: polysketch lets a template only call its macros, so that none can call itself", id.name)
			}
			if len(open) > 0 && k >= open[len(open)-1] {
				return fmt.Errorf("macro %s is called inside a macro defined before it, or inside itself: recursive macros are not supported", id.name)
			}
		}
		switch {
		case isDef:
			open = append(open, count)
			count++
		case tag == "endmacro" && len(open) > 0:
			open = open[:len(open)-1]
		}
	}
	return nil
}

// jinjaTags returns the contents of the statements and expressions of a
// template ({% … %} and {{ … }}), trimmed of white space and of the
// white-space control signs; comments are left out.
func jinjaTags(src string) ([]string, error) {
	var tags []string
	for {
		i := strings.Index(src, "{")
		if i < 0 || i+1 == len(src) {
			return tags, nil
		}
		var end string
		switch src[i+1] {
		case '%':
			end = "%}"
		case '{':
			end = "}}"
		case '#':
			j := strings.Index(src[i+2:], "#}")
			if j < 0 {
				return nil, errors.New("a comment {# is not closed")
			}
			src = src[i+2+j+2:]
			continue
		default:
			src = src[i+1:]
			continue
		}
		// The end of the tag, outside string literals.
		body := src[i+2:]
		j, quote := 0, byte(0)
		for ; j < len(body); j++ {
			c := body[j]
			switch {
			case quote != 0 && c == '\\':
				j++
			case quote != 0 && c == quote:
				quote = 0
			case quote == 0 && (c == '\'' || c == '"'):
				quote = c
			case quote == 0 && strings.HasPrefix(body[j:], end):
				goto found
			}
		}
		return nil, fmt.Errorf("a tag %s is not closed", src[i:i+2])
	found:
		tags = append(tags, strings.Trim(body[:j], " \t\r\n-+"))
		src = body[j+2:]
	}
}

// macroName returns the name a {% macro name(…) %} tag defines.
func macroName(tag string) (string, bool) {
	rest, ok := strings.CutPrefix(tag, "macro")
	if !ok || rest == "" || !strings.ContainsAny(rest[:1], " \t\r\n") {
		return "", false
	}
	rest = strings.TrimSpace(rest)
	name, _, _ := strings.Cut(rest, "(")
	return strings.TrimSpace(name), true
}

// ident is a name in an expression, and whether a call follows it.
type ident struct {
	name   string
	called bool
}

// identifiers returns the names in an expression, outside string literals
// and after no dot (attributes are not variables).
func identifiers(expr string) []ident {
	var out []ident
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '\'' || c == '"':
			i++
			for i < len(expr) && expr[i] != c {
				if expr[i] == '\\' {
					i++
				}
				i++
			}
			i++
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(expr) && (expr[j] == '_' || expr[j] >= 'a' && expr[j] <= 'z' || expr[j] >= 'A' && expr[j] <= 'Z' || expr[j] >= '0' && expr[j] <= '9') {
				j++
			}
			dot := strings.TrimRight(expr[:i], " \t\r\n")
			if !strings.HasSuffix(dot, ".") {
				rest := strings.TrimLeft(expr[j:], " \t\r\n")
				out = append(out, ident{expr[i:j], strings.HasPrefix(rest, "(")})
			}
			i = j
		case c >= '0' && c <= '9':
			for i < len(expr) && (expr[i] == '.' || expr[i] == '_' || expr[i] >= '0' && expr[i] <= '9' || expr[i] >= 'a' && expr[i] <= 'z' || expr[i] >= 'A' && expr[i] <= 'Z') {
				i++
			}
		default:
			i++
		}
	}
	return out
}

// templatePrompt renders msgs with the model's template t: any role the
// template takes, content as a string or a list of text parts.
func templatePrompt(t *chatTemplate, msgs []message) (string, *apiError) {
	if len(msgs) == 0 {
		return "", errorf(http.StatusBadRequest, "invalid_value", "messages: empty; send at least one {\"role\": \"user\", \"content\": ...}")
	}
	list := make([]chatMessage, len(msgs))
	for i, m := range msgs {
		if m.Role == "" {
			p := fmt.Sprintf("messages[%d].role", i)
			e := errorf(http.StatusBadRequest, "invalid_value", "%s is missing: want system, user, assistant, or another role the model's chat template takes", p)
			e.Param = &p
			return "", e
		}
		text, ok := m.text()
		if !ok {
			p := fmt.Sprintf("messages[%d].content", i)
			e := errorf(http.StatusBadRequest, "invalid_value", "%s: want a string or a list of text parts", p)
			e.Param = &p
			return "", e
		}
		list[i] = chatMessage{m.Role, text}
	}
	return t.render(list)
}
