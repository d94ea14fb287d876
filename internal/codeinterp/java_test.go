package codeinterp

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func startJava(t *testing.T, cwd string) Runtime {
	t.Helper()
	factory, err := JavaFactory("java", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return startRuntime(t, "java", factory, cwd)
}

func TestJavaState(t *testing.T) {
	checkResults(t, startJava(t, t.TempDir()), []resultCase{
		{"declaration has no result", "int x = 40;", ""},
		{"expression", "x + 2", "42"},
		{"variable", "x", "40"},
		{"several snippets, the last one's value", "int y = 1;\ny += x;\ny", "41"},
		{"method", "int twice(int n) { return 2 * n; }", ""},
		{"method call", "twice(21)", "42"},
		{"class", "class P { String hi() { return \"hi\"; } }\nnew P().hi()", "hi"},
		{"string without quotes", "\"bar\"", "bar"},
		{"default imports", "new ArrayList<>(List.of(1, 2))", "[1, 2]"},
		{"null has no result", "String s = null;\ns", ""},
		{"void call has no result", "System.out.flush()", ""},
		{"redeclaration", "String x = \"now a string\";\nx", "now a string"},
	})
}

func TestJavaOutputOrder(t *testing.T) {
	checkOutputOrder(t, startJava(t, t.TempDir()), `System.out.println("one");
System.err.println("two");
System.out.print("three\n");
new ProcessBuilder("echo", "child").inheritIO().start().waitFor();
printf("%s%n", "four");
5`)
}

func TestJavaErrors(t *testing.T) {
	rt := startJava(t, t.TempDir())
	run(t, rt, "int kept = 7;")
	checkErrors(t, rt, []errorCase{
		{"thrown", "int zero = 0;\n1 / zero", "EvalException", "/ by zero", "java.lang.ArithmeticException: / by zero"},
		{"without a message", "throw new IllegalStateException()", "EvalException", "", "java.lang.IllegalStateException\n\tat "},
		{"does not compile", "undefinedVar + 1", "CompilationException", "", "undefinedVar + 1\n^^^^^^^^^^^^\ncannot find symbol\n  symbol:   variable undefinedVar"},
		{"incomplete", "int y = ", "IncompleteSourceException", "", "Incomplete input:\nint y ="},
		{"unresolved", "void f() { g(); }\nf()", "UnresolvedReferenceException", "Attempt to use definition snippet with unresolved references in MethodSnippet:f/()void-void f() { g(); }", "UnresolvedReferenceException"},
		{"a result whose toString throws", "new Object() { public String toString() { throw new IllegalStateException(\"no text\"); } }", "IllegalStateException", "no text", "java.lang.IllegalStateException: no text"},
		{"stops at the first failure", "kept = 8;\nthrow new RuntimeException(\"stop\");\nkept = 9;", "EvalException", "stop", "java.lang.RuntimeException: stop"},
	}, nil)
	if got := mainText(run(t, rt, "kept")); got != "8" {
		t.Errorf("kept = %q after the errors, want 8 (the snippet before the failure ran, the one after did not)", got)
	}
}

func TestJavaInterrupt(t *testing.T) {
	rt := startJava(t, t.TempDir())
	run(t, rt, "String kept = \"yes\";")
	// The error names the snippet stopped, as IJava's does.
	tests := []struct{ code, stopped, wantKept string }{
		{"while (true) {}", "while (true) {}", "yes"},
		{"Thread.sleep(30000);", "Thread.sleep(30000);", "yes"},
		// The snippets before the stopped one have run, those after it do not.
		{"kept = \"before\";\nwhile (true) {}\nkept = \"after\";", "while (true) {}", "before"},
	}
	for _, tt := range tests {
		o := interruptAfter(t, rt, tt.code, time.Second)
		want := "Evaluator was interrupted while executing: '" + tt.stopped + "'"
		if errs := o.of(Error); len(errs) != 1 || errs[0].Name != "EvaluationInterruptedException" || errs[0].Value != want {
			t.Errorf("%q: errors %+v, want one EvaluationInterruptedException %q", tt.code, errs, want)
		}
		if got := mainText(run(t, rt, "kept")); got != tt.wantKept {
			t.Errorf("after interrupting %q: kept = %q, want %q", tt.code, got, tt.wantKept)
		}
	}
}

func TestJavaEnvAndCwd(t *testing.T) {
	dir := t.TempDir()
	rt := startJava(t, dir)
	if got := mainText(run(t, rt, `System.getProperty("user.dir") + " " + new File("x").getAbsolutePath()`)); got != dir+" "+dir+"/x" {
		t.Errorf("cwd %q, want %s", got, dir)
	}
	// Variables are system properties, as on E2B; the process environment
	// stays what the JVM started with.
	ctx := context.Background()
	restore, err := rt.SetEnv(ctx, map[string]string{"A_VAR": "1", "HOME": "/elsewhere", "": "no name"})
	if err != nil {
		t.Fatal(err)
	}
	get := `System.getProperty("A_VAR") + " " + System.getProperty("HOME") + " " + System.getenv("HOME")`
	if got, want := mainText(run(t, rt, get)), "1 /elsewhere "+os.Getenv("HOME"); got != want {
		t.Errorf("after SetEnv: %q, want %q", got, want)
	}
	if err := restore(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := mainText(run(t, rt, get)), "null null "+os.Getenv("HOME"); got != want {
		t.Errorf("after restore: %q, want %q", got, want)
	}
}

func TestJavaThroughServer(t *testing.T) {
	requireBinary(t, "java")
	java, err := JavaFactory("java", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, func(c *Config) {
		c.Runtimes = map[string]Factory{"java": java}
		c.DefaultCwd = t.TempDir()
	})
	status, lines := execute(t, context.Background(), ts.url, map[string]any{
		"code": `System.out.println(System.getProperty("FOO"));
System.getProperty("FOO")`, "language": "java", "env_vars": map[string]string{"FOO": "bar"},
	}, nil)
	want := []map[string]any{
		{"type": "number_of_executions", "execution_count": 1.0},
		{"type": "stdout", "text": "bar\n"},
		{"type": "result", "is_main_result": true, "text": "bar"},
		{"type": "end_of_execution"},
	}
	if diff := cmp.Diff(want, withoutTimestamps(t, lines)); status != http.StatusOK || diff != "" {
		t.Errorf("status %d, lines (-want +got):\n%s", status, diff)
	}
	_, lines = execute(t, context.Background(), ts.url, map[string]any{"code": `System.getProperty("FOO", "default")`, "language": "java"}, nil)
	if got := withoutTimestamps(t, lines)[1]["text"]; got != "default" {
		t.Errorf("FOO after the run that set it = %v, want it gone", got)
	}
}
