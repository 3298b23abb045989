package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// version describes the build of this program: the module version, which
// is "(devel)" when built from a source tree rather than installed at a
// version, the version-control revision it was built from, if known, and
// the Go toolchain.
func version(info *debug.BuildInfo, ok bool) string {
	v := "(devel)"
	if ok && info.Main.Version != "" {
		v = info.Main.Version
	}
	s := "polysketch " + v
	var vcs []string
	if ok {
		settings := make(map[string]string)
		for _, kv := range info.Settings {
			settings[kv.Key] = kv.Value
		}
		if rev := settings["vcs.revision"]; rev != "" {
			vcs = append(vcs, settings["vcs"]+" "+rev)
		}
		if t := settings["vcs.time"]; t != "" {
			vcs = append(vcs, t)
		}
		if settings["vcs.modified"] == "true" {
			vcs = append(vcs, "with uncommitted changes")
		}
	}
	if len(vcs) > 0 {
		s += " (" + strings.Join(vcs, ", ") + ")"
	}
	goVersion := runtime.Version()
	if ok && info.GoVersion != "" {
		goVersion = info.GoVersion
	}
	return fmt.Sprintf("%s %s %s/%s", s, goVersion, runtime.GOOS, runtime.GOARCH)
}
