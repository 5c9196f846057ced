package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"unicode"
)

// everyCommand is every command and subcommand, hidden ones included, as
// the arguments that name it.
func everyCommand() [][]string {
	var all [][]string
	for _, c := range commands() {
		all = append(all, []string{c.name})
		for _, sub := range c.subs {
			all = append(all, strings.Fields(sub.name))
		}
	}
	return all
}

// Every command's --help exits 0 and explains the command: after the
// usage line(s), a paragraph of prose, then the flags (if it has any),
// not the bare flag list that serve and the operator commands printed.
func TestEveryCommandExplainsItself(t *testing.T) {
	names := map[string]bool{}
	for _, args := range everyCommand() {
		names[strings.Join(args, " ")] = true
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append(args, "--help"), &stdout, &stderr)
		out := stderr.String() + stdout.String()
		name := "tenure " + strings.Join(args, " ")
		if code != 0 {
			t.Errorf("%s --help: exit %d, want 0:\n%s", name, code, out)
			continue
		}
		if !strings.HasPrefix(out, "usage: "+name) {
			t.Errorf("%s --help does not start with %q:\n%s", name, "usage: "+name, out)
			continue
		}
		// The usage block ends at the first empty line; the help follows.
		_, help, _ := strings.Cut(out, "\n\n")
		first, _, _ := strings.Cut(help, "\n")
		words := strings.Fields(first)
		if len(words) < 4 || !unicode.IsUpper([]rune(first)[0]) || strings.HasPrefix(first, " ") {
			t.Errorf("%s --help: the line after the usage is %q, want a sentence saying what the command does:\n%s", name, first, out)
		}
		// A flag's line names it and at most one placeholder: a backquoted
		// phrase in its usage becomes the placeholder (auth init showed
		// "-coordinators tenure serve").
		for _, line := range strings.Split(out, "\n") {
			flag, _, _ := strings.Cut(line, "\t") // a one-letter flag's usage follows on its line
			if strings.HasPrefix(flag, "  -") && len(strings.Fields(flag)) > 2 {
				t.Errorf("%s --help: flag line %q: a placeholder of more than one word (a backquoted phrase in its usage)", name, line)
			}
		}
	}
	// The commands README and the top-level usage name are all there.
	for _, want := range []string{"serve", "offer", "cancel", "resolve", "policy", "watch", "status", "auth", "auth init",
		"heads", "log", "log status", "log archive", "log remove", "log restore", "cluster", "cluster up", "chaos",
		"bench", "demo", "version", "audit", "ui", "submit", "jobs", "jobs ls", "jobs get", "queues"} {
		if !names[want] {
			t.Errorf("tenure %s is not among the commands", want)
		}
	}
}

// A mistake in the flags of any command (or subcommand) is one line naming
// how to get help, never the usage under it.
func TestEveryFlagErrorIsOneLine(t *testing.T) {
	for _, args := range everyCommand() {
		if c := find(args); len(c.subs) > 0 && c.name != "chaos" {
			continue // a dispatcher: --bogus is an unknown subcommand
		}
		var stderr bytes.Buffer
		code := run(context.Background(), append(args, "--bogus"), &bytes.Buffer{}, &stderr)
		want := "tenure " + args[0] + ": flag provided but not defined: -bogus (see tenure " + strings.Join(args, " ") + " --help)\n"
		if code != 2 || stderr.String() != want {
			t.Errorf("tenure %s --bogus: exit %d and %q, want 2 and %q", strings.Join(args, " "), code, stderr.String(), want)
		}
	}
}

// find is the command args name.
func find(args []string) *command {
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		for _, sub := range c.subs {
			if sub.name == strings.Join(args, " ") {
				return sub
			}
		}
		return c
	}
	return nil
}
