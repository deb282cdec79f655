package dpa

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sdr-rdma/sdr/internal/privileged"
)

// flexioModule is the pkg-config module of DOCA's FlexIO host library,
// the one doca_dpa.go's `#cgo pkg-config` line and `make dpa` name.
const flexioModule = "libflexio"

// TestFlexioDeclLayout compares flexio_decl.h with the FlexIO header of
// an installed DOCA: every structure with fields (its size, alignment,
// and each field's offset, size and type) and every enum constant, as
// host.h sees them through flexio_api.h. The comparison against a real
// DOCA runs where pkg-config finds libflexio; the comparator itself runs
// everywhere, against synthetic installations made from flexio_decl.h.
func TestFlexioDeclLayout(t *testing.T) {
	gcc := privileged.RequireTool(t, "gcc", "compiles the layout program")
	pkgConfig := privileged.RequireTool(t, "pkg-config", "finds libflexio's flags")
	privileged.RequireFile(t, "/usr/include/infiniband/verbs.h", "flexio_decl.h includes it (libibverbs-dev)")
	decl, err := os.ReadFile("flexio_decl.h")
	if err != nil {
		t.Fatal(err)
	}
	c := newLayoutComparator(t, gcc, pkgConfig, string(decl))

	t.Run("installed", func(t *testing.T) {
		if exec.Command(pkgConfig, "--exists", flexioModule).Run() != nil {
			t.Skipf("pkg-config finds no %s here (no DOCA FlexIO SDK; on a BlueField host add "+
				"/opt/mellanox/flexio/lib/pkgconfig to PKG_CONFIG_PATH): nothing to compare flexio_decl.h with", flexioModule)
		}
		diffs, err := c.compare(os.Environ())
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range diffs {
			t.Errorf("flexio_decl.h differs from the installed libflexio/flexio.h: %s", d)
		}
	})

	// The synthetic installations' expected offsets are those of an LP64
	// ABI (x86-64, aarch64), where flexio_cq_attr's uint16_t pair starts
	// at byte 40.
	for _, tc := range []struct {
		name      string
		old, new  string // the edit of flexio_decl.h that makes the installed header
		wantDiffs []string
	}{
		{name: "unchanged"},
		{
			name: "wider field",
			old:  "\tuint8_t log_cq_depth;\n", new: "\tuint32_t log_cq_depth;\n",
			wantDiffs: []string{
				"struct flexio_cq_attr.element_type: flexio_decl.h offset 1 size 1 type uint8_t, installed offset 4 size 1 type uint8_t",
				"struct flexio_cq_attr.log_cq_depth: flexio_decl.h offset 0 size 1 type uint8_t, installed offset 0 size 4 type not uint8_t",
			},
		},
		{
			name: "same-size type",
			old:  "\tbool no_arm;\n", new: "\tuint8_t no_arm;\n",
			wantDiffs: []string{
				"struct flexio_cq_attr.no_arm: flexio_decl.h offset 44 size 1 type bool, installed offset 44 size 1 type not bool",
			},
		},
		{
			name: "field order",
			old:  "\tuint16_t cq_period;\n\tuint16_t cq_max_count;\n", new: "\tuint16_t cq_max_count;\n\tuint16_t cq_period;\n",
			wantDiffs: []string{
				"struct flexio_cq_attr.cq_max_count: flexio_decl.h offset 42 size 2 type uint16_t, installed offset 40 size 2 type uint16_t",
				"struct flexio_cq_attr.cq_period: flexio_decl.h offset 40 size 2 type uint16_t, installed offset 42 size 2 type uint16_t",
			},
		},
		{
			name: "enum value",
			old:  "FLEXIO_MEMTYPE_HOST = 1,", new: "FLEXIO_MEMTYPE_HOST = 2,",
			wantDiffs: []string{"enum FLEXIO_MEMTYPE_HOST: flexio_decl.h = 1, installed = 2"},
		},
	} {
		t.Run("synthetic/"+tc.name, func(t *testing.T) {
			env := syntheticDOCA(t, editOnce(t, string(decl), tc.old, tc.new))
			diffs, err := c.compare(env)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(diffs, tc.wantDiffs) {
				t.Errorf("differences:\n%s\nwant:\n%s", strings.Join(diffs, "\n"), strings.Join(tc.wantDiffs, "\n"))
			}
		})
	}

	t.Run("synthetic/missing field", func(t *testing.T) {
		env := syntheticDOCA(t, editOnce(t, string(decl), "\tuint16_t cq_max_count;\n", ""))
		_, err := c.compare(env)
		if err == nil || !strings.Contains(err.Error(), "no member named 'cq_max_count'") {
			t.Fatalf("a field the installed header lacks: err %v, want the compiler naming cq_max_count", err)
		}
	})

	// Under the doca tag a missing header is an error, not a fallback.
	t.Run("doca without header", func(t *testing.T) {
		_, err := c.layout(nil, "-DSDR_DPA_DOCA")
		if err == nil || !strings.Contains(err.Error(), "no <libflexio/flexio.h>") {
			t.Fatalf("SDR_DPA_DOCA without libflexio: err %v, want flexio_api.h's #error", err)
		}
	})
}

// layoutComparator builds the layout program for flexio_decl.h's
// structures and enums and holds flexio_decl.h's own layout.
type layoutComparator struct {
	gcc, pkgConfig, dir, prog string
	decl                      map[string]string
}

func newLayoutComparator(t *testing.T, gcc, pkgConfig, decl string) *layoutComparator {
	t.Helper()
	structs, enums, err := parseFlexioDecl(decl)
	if err != nil {
		t.Fatal(err)
	}
	// A parser that found nothing would compare nothing and pass.
	cq := slices.IndexFunc(structs, func(s declStruct) bool { return s.name == "flexio_cq_attr" })
	if cq < 0 || len(structs[cq].fields) != 16 || !slices.Contains(enums, "FLEXIO_CQ_ELEMENT_TYPE_DPA_THREAD") {
		t.Fatalf("parsed %d structures (flexio_cq_attr at %d) and enums %v from flexio_decl.h: the parser lost some", len(structs), cq, enums)
	}
	nfields := 0
	for _, s := range structs {
		nfields += len(s.fields)
	}
	t.Logf("flexio_decl.h: %d structures with %d fields, %d enum constants", len(structs), nfields, len(enums))
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	c := &layoutComparator{gcc: gcc, pkgConfig: pkgConfig, dir: dir, prog: filepath.Join(t.TempDir(), "flexio_layout.c")}
	if err := os.WriteFile(c.prog, []byte(layoutProgram(structs, enums)), 0o644); err != nil {
		t.Fatal(err)
	}
	if c.decl, err = c.layout(nil); err != nil {
		t.Fatal(err)
	}
	return c
}

// compare returns, sorted, how the layout of the libflexio pkg-config
// finds in env differs from flexio_decl.h's; an error when pkg-config
// or the compiler fails (a field or constant the installed header lacks).
func (c *layoutComparator) compare(env []string) ([]string, error) {
	cmd := exec.Command(c.pkgConfig, "--cflags", flexioModule)
	cmd.Env = env
	cflags, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("pkg-config --cflags %s: %w", flexioModule, err)
	}
	installed, err := c.layout(env, append(strings.Fields(string(cflags)), "-DSDR_DPA_DOCA")...)
	if err != nil {
		return nil, err
	}
	var diffs []string
	for key, d := range c.decl {
		if in, ok := installed[key]; !ok || in != d {
			diffs = append(diffs, fmt.Sprintf("%s: flexio_decl.h %s, installed %s", key, d, in))
		}
	}
	for key, in := range installed {
		if _, ok := c.decl[key]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: flexio_decl.h none, installed %s", key, in))
		}
	}
	slices.Sort(diffs)
	return diffs, nil
}

// layout compiles the layout program with flags through flexio_api.h
// and runs it: a value per structure, field and enum constant.
func (c *layoutComparator) layout(env []string, flags ...string) (map[string]string, error) {
	bin := strings.TrimSuffix(c.prog, ".c") // rebuilt by every call; the test makes one at a time
	args := append([]string{"-std=gnu11", "-I" + c.dir, "-o", bin, c.prog}, flags...)
	cmd := exec.Command(c.gcc, args...)
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(slices.Clip(env), "LC_ALL=C") // gcc's messages in ASCII, as the tests match them
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("gcc %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	l := map[string]string{}
	for line := range strings.Lines(string(out)) {
		// "struct S size N align N", "struct S.f offset ...", "enum C = V"
		kind, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		name, value, _ := strings.Cut(rest, " ")
		l[kind+" "+name] = value
	}
	return l, nil
}

// layoutProgram is C that prints, for each structure, its size and
// alignment and each field's offset, size and whether its type is the
// one flexio_decl.h gives; and each enum constant's value.
func layoutProgram(structs []declStruct, enums []string) string {
	var b strings.Builder
	b.WriteString(`#include <stddef.h>
#include <stdio.h>
#include "flexio_api.h"

#define FIELD(S, F, T) printf("struct " #S "." #F " offset %zu size %zu type %s\n", offsetof(struct S, F), \
	sizeof(((struct S *)0)->F), __builtin_types_compatible_p(__typeof__(((struct S *)0)->F), T) ? #T : "not " #T)

int main(void)
{
`)
	for _, s := range structs {
		fmt.Fprintf(&b, "\tprintf(\"struct %[1]s size %%zu align %%zu\\n\", sizeof(struct %[1]s), _Alignof(struct %[1]s));\n", s.name)
		for _, f := range s.fields {
			fmt.Fprintf(&b, "\tFIELD(%s, %s, %s);\n", s.name, f.name, f.typ)
		}
	}
	for _, e := range enums {
		fmt.Fprintf(&b, "\tprintf(\"enum %[1]s = %%lld\\n\", (long long)(%[1]s));\n", e)
	}
	b.WriteString("\treturn 0;\n}\n")
	return b.String()
}

// declStruct is a structure of flexio_decl.h with its fields, those of
// anonymous unions included (they are the structure's members in C).
type declStruct struct {
	name   string
	fields []declField
}

type declField struct{ name, typ string }

var (
	cComment   = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`)
	cDirective = regexp.MustCompile(`(?m)^\s*#.*$`)
	// A top-level definition of a tagged type: struct S { ... }, enum E
	// { ... }, typedef enum { ... } T.
	cTagged     = regexp.MustCompile(`(?s)^(?:typedef\s+)?(struct|union|enum)\s*(\w*)\s*\{(.*)\}\s*\w*$`)
	cAnonymous  = regexp.MustCompile(`(?s)^(?:struct|union)\s*\{(.*)\}$`)
	cDeclarator = regexp.MustCompile(`(?s)^([\w\s*]*?[\w*])\s*\b(\w+)\s*((?:\[\w*\])*)$`)
	cIdentifier = regexp.MustCompile(`^\w+$`)
)

// parseFlexioDecl finds flexio_decl.h's structures with fields and its
// enum constants. It knows the header's own style and refuses what it
// does not parse (a nested named type, a function pointer field, two
// declarators in one declaration), so that nothing goes unchecked.
func parseFlexioDecl(src string) (structs []declStruct, enums []string, err error) {
	src = cDirective.ReplaceAllString(cComment.ReplaceAllString(src, ""), "")
	for _, stmt := range splitTopLevel(src, ';') {
		m := cTagged.FindStringSubmatch(stmt)
		if m == nil {
			continue // a declaration of a function, a typedef or an incomplete structure
		}
		switch kind, name, body := m[1], m[2], m[3]; {
		case kind == "enum":
			for _, c := range splitTopLevel(body, ',') {
				c, _, _ = strings.Cut(c, "=")
				if c = strings.TrimSpace(c); !cIdentifier.MatchString(c) {
					return nil, nil, fmt.Errorf("enum constant %q", c)
				}
				enums = append(enums, c)
			}
		case kind == "struct" && name != "":
			fields, err := parseFields(body)
			if err != nil {
				return nil, nil, fmt.Errorf("struct %s: %w", name, err)
			}
			structs = append(structs, declStruct{name, fields})
		default:
			return nil, nil, fmt.Errorf("unparsed top-level %s %q", kind, name)
		}
	}
	return structs, enums, nil
}

func parseFields(body string) ([]declField, error) {
	var fields []declField
	for _, d := range splitTopLevel(body, ';') {
		if m := cAnonymous.FindStringSubmatch(d); m != nil {
			inner, err := parseFields(m[1])
			if err != nil {
				return nil, err
			}
			fields = append(fields, inner...)
			continue
		}
		m := cDeclarator.FindStringSubmatch(d)
		if m == nil || strings.ContainsAny(d, "(),{") {
			return nil, fmt.Errorf("unparsed field %q", d)
		}
		fields = append(fields, declField{name: m[2], typ: strings.Join(strings.Fields(m[1]), " ") + m[3]})
	}
	return fields, nil
}

// splitTopLevel splits s at sep outside braces, dropping empty parts.
func splitTopLevel(s string, sep byte) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) {
			switch s[i] {
			case '{':
				depth++
			case '}':
				depth--
			}
			if s[i] != sep || depth != 0 {
				continue
			}
		}
		if p := strings.TrimSpace(s[start:i]); p != "" {
			parts = append(parts, p)
		}
		start = i + 1
	}
	return parts
}

// editOnce returns s with old replaced by new, failing t unless old
// occurs exactly once (an edit that no longer applies must not pass as
// "no difference").
func editOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if old == "" {
		return s
	}
	if n := strings.Count(s, old); n != 1 {
		t.Fatalf("flexio_decl.h holds %q %d times, want once", old, n)
	}
	return strings.Replace(s, old, new, 1)
}

// syntheticDOCA makes an installed FlexIO SDK in a temporary directory,
// libflexio/flexio.h being flexioH, and returns an environment in which
// pkg-config finds it. Its flexio.h also checks that flexio_api.h states
// what DOCA's header expects (the API version, experimental calls).
func syntheticDOCA(t *testing.T, flexioH string) []string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"include/libflexio/flexio_ver.h": "#define FLEXIO_VER(major, minor, sub) (((major) << 24) | ((minor) << 16) | (sub))\n",
		"include/libflexio/flexio.h": "#if FLEXIO_VER_USED != FLEXIO_VER(24, 10, 0) || !defined(FLEXIO_ALLOW_EXPERIMENTAL_API)\n" +
			"#error \"flexio_api.h states neither FLEXIO_VER_USED 24.10 nor FLEXIO_ALLOW_EXPERIMENTAL_API\"\n#endif\n" + flexioH,
		"lib/pkgconfig/" + flexioModule + ".pc": "prefix=" + root + "\nincludedir=${prefix}/include\nlibdir=${prefix}/lib\n\n" +
			"Name: " + flexioModule + "\nDescription: synthetic FlexIO SDK for TestFlexioDeclLayout\nVersion: 24.10.0\n" +
			"Cflags: -I${includedir}\nLibs: -L${libdir} -lflexio\n",
	}
	for name, text := range files {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return append(os.Environ(), "PKG_CONFIG_PATH="+filepath.Join(root, "lib/pkgconfig"))
}
