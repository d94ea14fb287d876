package template

// CodeInterpreterName is the built-in template @e2b/code-interpreter
// creates sandboxes from.
const CodeInterpreterName = "code-interpreter-v1"

// CodeInterpreterServer is where the code interpreter server (the host's
// codeinterp binary, mounted read-only by the server) appears in sandboxes.
const CodeInterpreterServer = "/opt/agent-sandbox/bin/codeinterp"

// CodeInterpreterPort is where the code interpreter server listens.
const CodeInterpreterPort = 49999

// CodeInterpreter returns the spec of the built-in "code-interpreter-v1"
// template: base with Jupyter's Python kernel and the data science stack
// from Debian (numpy, pandas, matplotlib, scipy, scikit-learn, seaborn,
// Pillow), the R kernel and Java 17 (the headless JRE: its module image
// holds JShell and the compiler the server's Java kernel runs on, so the
// JDK is not needed), and the code interpreter server started in every
// sandbox. A shell loop restarts the server if it dies.
func CodeInterpreter() Spec {
	s := Base()
	s.Name = CodeInterpreterName
	s.Packages = append(s.Packages,
		"python3-ipykernel", "python3-numpy", "python3-pandas", "python3-matplotlib",
		"python3-scipy", "python3-sklearn", "python3-seaborn", "python3-pil",
		"r-cran-irkernel", "openjdk-17-jre-headless",
	)
	s.StartCmd = "while :; do " + CodeInterpreterServer + " --addr 0.0.0.0:49999; sleep 0.5; done"
	s.ReadyPort = CodeInterpreterPort
	return s
}

// BuiltIn returns the specs of the built-in templates by name.
func BuiltIn() map[string]Spec {
	return map[string]Spec{
		BaseName:            Base(),
		CodeInterpreterName: CodeInterpreter(),
		DesktopName:         Desktop(),
		BrowserName:         Browser(),
	}
}
