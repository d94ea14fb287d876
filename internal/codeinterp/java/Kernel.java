// Kernel.java is the Java runtime of the code interpreter: a persistent
// JShell session, so variables, methods, classes and imports carry over
// from one cell to the next. It behaves as IJava, the kernel of the
// official code interpreter, does: a cell is split into snippets, each is
// evaluated in turn, the first failure ends the cell, and the value of the
// last snippet, if it is an expression, is the result (String.valueOf of
// the object, not JShell's quoted form). It starts with IJava's imports and
// printf.
//
// It speaks the kernel protocol of ProcessRuntime (process.go): requests
// on fd 3, messages on fd 4, JSON lines. System.out and System.err become
// stdout and stderr messages of the running cell; before "end" the kernel
// writes a marker line (mark + id) to the real fds 1 and 2, so the server
// knows that what child processes wrote there before has arrived.
//
// Snippets run in this JVM (IJava's way too), each on a thread of its own,
// so SIGINT can stop one: the thread is interrupted, then stopped by force
// if it goes on. Errors are named, and their values given, as IJava's
// error replies give them: EvalException for an exception the code threw
// (value: its message, "" without one; traceback: its stack trace under
// its real class), CompilationException for code that does not compile
// (value ""; the diagnostics, the source pointed at, are the traceback),
// IncompleteSourceException for a cell that ends mid-statement (value ""),
// EvaluationInterruptedException for a stopped snippet.
//
// setenv sets each variable as a system property, as the official server
// does (its tests read System.getProperty): a JVM cannot change its own
// process environment, so System.getenv and child processes see only what
// the process was started with (the sandbox-wide variables).
//
// Its one argument is the mark of its marker lines.

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;

import jdk.jshell.DeclarationSnippet;
import jdk.jshell.Diag;
import jdk.jshell.EvalException;
import jdk.jshell.JShell;
import jdk.jshell.JShellException;
import jdk.jshell.Snippet;
import jdk.jshell.SnippetEvent;
import jdk.jshell.SourceCodeAnalysis;
import jdk.jshell.execution.DirectExecutionControl;
import jdk.jshell.spi.ExecutionControl;
import jdk.jshell.spi.ExecutionControlProvider;
import jdk.jshell.spi.ExecutionEnv;
import jdk.jshell.spi.SPIResolutionException;

public final class Kernel {
    /** What IJava's startup script gives every session. */
    private static final String[] PRELUDE = {
        "import java.util.*;", "import java.io.*;", "import java.math.*;", "import java.net.*;",
        "import java.util.concurrent.*;", "import java.util.prefs.*;", "import java.util.regex.*;",
        "public void printf(String format, Object... args) { System.out.printf(format, args); }",
    };

    private final String mark;
    private final OutputStream messages;
    private final CellControl control = new CellControl();
    private final JShell shell;
    private final SourceCodeAnalysis analysis;
    /** What each setenv replaced, by request id, until restoreenv puts it back. */
    private final Map<String, Map<String, String>> savedEnv = new HashMap<>();
    /** The id of the cell being run; output outside a cell is dropped. */
    private volatile String current;

    private Kernel(String mark, OutputStream messages) {
        this.mark = mark;
        this.messages = messages;
        this.shell = JShell.builder().executionEngine(new ExecutionControlProvider() {
            @Override
            public String name() {
                return "cell";
            }

            @Override
            public ExecutionControl generate(ExecutionEnv env, Map<String, String> params) {
                return control;
            }
        }, Map.of()).build();
        this.analysis = shell.sourceCodeAnalysis();
    }

    public static void main(String[] args) throws Exception {
        Kernel k = new Kernel("\u001e" + args[0] + ":", new FileOutputStream("/proc/self/fd/4"));
        System.setIn(InputStream.nullInputStream());
        // Not autoflushing: that would flush after every write, splitting lines.
        System.setOut(new PrintStream(k.new CellStream("stdout"), false, StandardCharsets.UTF_8));
        System.setErr(new PrintStream(k.new CellStream("stderr"), false, StandardCharsets.UTF_8));
        sun.misc.Signal.handle(new sun.misc.Signal("INT"), sig -> k.control.stop());
        for (String s : PRELUDE) {
            k.shell.eval(s);
        }
        k.send(Json.object("type", "ready"));

        BufferedReader in = new BufferedReader(new InputStreamReader(new FileInputStream("/proc/self/fd/3"), StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            Map<String, Object> req = Json.parseObject(line);
            String id = (String) req.get("id");
            switch ((String) req.get("type")) {
                case "execute" -> k.execute(id, (String) req.get("code"));
                case "setenv" -> k.setenv(id, Json.stringMap(req.get("vars")));
                case "restoreenv" -> k.restoreenv(id, (String) req.get("token"));
                default -> k.send(Json.object("type", "error", "id", id, "name", "Error", "value", "unknown request " + req.get("type")));
            }
        }
        System.exit(0);
    }

    private void execute(String id, String code) {
        current = id;
        control.startCell();
        try {
            Object result = null;
            String remaining = code;
            SourceCodeAnalysis.CompletionInfo info;
            for (info = analysis.analyzeCompletion(remaining); info.completeness().isComplete(); info = analysis.analyzeCompletion(remaining)) {
                result = evalSnippet(info.source());
                remaining = info.remaining();
            }
            if (info.completeness() != SourceCodeAnalysis.Completeness.EMPTY) {
                String source = info.remaining().trim();
                throw new CellError("IncompleteSourceException", "", "Incomplete input:\n" + source);
            }
            if (result != null) {
                send(Json.object("type", "result", "id", id, "data", Map.of("text/plain", String.valueOf(result))));
            }
        } catch (CellError e) {
            send(Json.object("type", "error", "id", id, "name", e.name, "value", e.value, "traceback", e.traceback));
        } catch (RuntimeException e) {
            // A result's toString that throws, or JShell failing: named as IJava names what it catches.
            send(Json.object("type", "error", "id", id, "name", e.getClass().getSimpleName(), "value", messageOf(e), "traceback", stackTrace(e)));
        } finally {
            System.out.flush();
            System.err.flush();
            byte[] line = (mark + id + "\n").getBytes(StandardCharsets.UTF_8);
            writeFd(FileDescriptor.out, line);
            writeFd(FileDescriptor.err, line);
            current = null;
            send(Json.object("type", "end", "id", id));
        }
    }

    /** Evaluates one snippet and returns its value, if it is an expression with one. */
    private Object evalSnippet(String source) throws CellError {
        List<SnippetEvent> events = shell.eval(source);
        Object value = null;
        // Every result the control kept is taken, even when a later event fails.
        for (SnippetEvent e : events) {
            if (e.value() == null) {
                continue;
            }
            Snippet.SubKind kind = e.snippet().subKind();
            Object v = kind.isExecutable() ? control.take(e.value()) : null;
            value = switch (kind) {
                case VAR_VALUE_SUBKIND, OTHER_EXPRESSION_SUBKIND, TEMP_VAR_EXPRESSION_SUBKIND -> v;
                default -> null;
            };
        }
        if (control.stopped()) {
            String what = "Evaluator was interrupted while executing: '" + source.strip() + "'";
            throw new CellError("EvaluationInterruptedException", what, "EvaluationInterruptedException: " + what);
        }
        for (SnippetEvent e : events) {
            if (e.causeSnippet() != null) {
                continue; // a snippet this one replaced or updated
            }
            if (e.exception() != null) {
                throw runtimeError(e.exception());
            }
            if (!e.status().isDefined()) {
                throw compileError(e.snippet());
            }
        }
        return value;
    }

    private static String stackTrace(Throwable e) {
        StringWriter trace = new StringWriter();
        e.printStackTrace(new PrintWriter(trace));
        return trace.toString().stripTrailing();
    }

    /** An error's message, "" without one, as IJava's error replies show it. */
    private static String messageOf(Throwable e) {
        return e.getMessage() == null ? "" : e.getMessage();
    }

    private static CellError runtimeError(JShellException e) {
        String text = stackTrace(e);
        if (e instanceof EvalException ee) {
            text = text.replace(EvalException.class.getName(), ee.getExceptionClassName());
        }
        return new CellError(e.getClass().getSimpleName(), messageOf(e), text);
    }

    private CellError compileError(Snippet snippet) {
        String source = snippet.source();
        StringBuilder trace = new StringBuilder();
        shell.diagnostics(snippet).forEach(d -> {
            trace.append(pointAt(source, (int) d.getStartPosition(), (int) d.getEndPosition())).append(message(d)).append("\n\n");
        });
        if (snippet instanceof DeclarationSnippet ds) {
            shell.unresolvedDependencies(ds).forEach(dep -> trace.append("Unresolved dependency: ").append(dep).append('\n'));
        }
        // IJava's CompilationException has no message: what is wrong is in the traceback.
        return new CellError("CompilationException", "", trace.toString().stripTrailing());
    }

    /** A diagnostic's message without its location lines, as IJava shows it. */
    private static String message(Diag d) {
        StringBuilder out = new StringBuilder();
        for (String line : d.getMessage(null).split("\n")) {
            if (!line.trim().startsWith("location:")) {
                out.append(out.length() > 0 ? "\n" : "").append(line);
            }
        }
        return out.toString();
    }

    /** The source line holding start, and a line of carets under start..end. */
    private static String pointAt(String source, int start, int end) {
        if (start < 0 || start > source.length()) {
            return "";
        }
        int from = source.lastIndexOf('\n', Math.max(start - 1, 0)) + 1;
        int to = source.indexOf('\n', start);
        if (to < 0) {
            to = source.length();
        }
        int width = Math.max(1, Math.min(end, to) - start);
        return source.substring(from, to) + "\n" + " ".repeat(start - from) + "^".repeat(width) + "\n";
    }

    /** Sets each variable as a system property (an empty name cannot be one). */
    private void setenv(String id, Map<String, String> vars) {
        Map<String, String> prev = new LinkedHashMap<>();
        vars.forEach((name, value) -> {
            if (!name.isEmpty()) {
                prev.put(name, System.getProperty(name));
                setProperty(name, value);
            }
        });
        savedEnv.put(id, prev);
        send(Json.object("type", "env", "id", id));
    }

    private void restoreenv(String id, String token) {
        Map<String, String> prev = savedEnv.remove(token);
        if (prev == null) {
            send(Json.object("type", "error", "id", id, "name", "Error", "value", "no environment saved by request " + token));
            return;
        }
        prev.forEach(Kernel::setProperty);
        send(Json.object("type", "env", "id", id));
    }

    /** Sets a system property; null clears it. */
    private static void setProperty(String name, String value) {
        if (value == null) {
            System.clearProperty(name);
        } else {
            System.setProperty(name, value);
        }
    }

    private synchronized void send(String json) {
        try {
            messages.write((json + "\n").getBytes(StandardCharsets.UTF_8));
            messages.flush();
        } catch (IOException e) {
            System.exit(1); // the server is gone
        }
    }

    private static void writeFd(FileDescriptor fd, byte[] b) {
        try {
            FileOutputStream out = new FileOutputStream(fd);
            out.write(b);
            out.flush();
        } catch (IOException e) {
            System.exit(1);
        }
    }

    /** An error that ends a cell, as the error message shows it. */
    private static final class CellError extends Exception {
        final String name;
        final String value;
        final String traceback;

        CellError(String name, String value, String traceback) {
            super(name + ": " + value, null, false, false);
            this.name = name;
            this.value = value;
            this.traceback = traceback;
        }
    }

    /**
     * System.out or System.err of the cells, line-buffered: complete lines,
     * and whatever a flush finds, become messages of the running cell.
     */
    private final class CellStream extends OutputStream {
        private final String type;
        private final ByteArrayOutputStream pending = new ByteArrayOutputStream();

        CellStream(String type) {
            this.type = type;
        }

        @Override
        public synchronized void write(int b) {
            pending.write(b);
            if (b == '\n') {
                flush();
            }
        }

        @Override
        public synchronized void write(byte[] b, int off, int len) {
            int nl = -1;
            for (int j = off + len - 1; j >= off && nl < 0; j--) {
                if (b[j] == '\n') {
                    nl = j;
                }
            }
            if (nl < 0) {
                pending.write(b, off, len);
                return;
            }
            pending.write(b, off, nl + 1 - off);
            flush();
            pending.write(b, nl + 1, off + len - nl - 1);
        }

        @Override
        public synchronized void flush() {
            if (pending.size() == 0) {
                return;
            }
            String text = pending.toString(StandardCharsets.UTF_8);
            pending.reset();
            String id = current;
            if (id != null) {
                send(Json.object("type", type, "id", id, "text", text));
            }
        }
    }

    /**
     * Runs snippets in this JVM and keeps their values as objects, handing
     * JShell a key to each instead of its text (IJava's way), so a result
     * can be shown with String.valueOf.
     */
    private static final class CellControl extends DirectExecutionControl {
        private static final Object NULL = new Object();
        private final Map<String, Object> results = new ConcurrentHashMap<>();
        private volatile Thread running;
        private volatile boolean stopped;

        void startCell() {
            stopped = false;
        }

        boolean stopped() {
            return stopped;
        }

        Object take(String key) {
            Object v = results.remove(key);
            return v == NULL ? null : v;
        }

        @Override
        protected String invoke(Method doit) throws Exception {
            if (stopped) {
                throw new StoppedException();
            }
            Object[] value = {null};
            Throwable[] failure = {null};
            Thread t = new Thread(() -> {
                try {
                    value[0] = doit.invoke(null);
                } catch (Throwable e) {
                    failure[0] = e;
                }
            }, "main");
            running = t;
            t.start();
            try {
                t.join();
            } finally {
                running = null;
            }
            if (stopped) {
                throw new StoppedException();
            }
            if (failure[0] instanceof InvocationTargetException ite) {
                Throwable cause = ite.getCause();
                if (cause instanceof SPIResolutionException) {
                    throw ite; // JShell reports it as an UnresolvedReferenceException
                }
                throw new UserException(cause.getMessage(), cause.getClass().getName(), cause.getStackTrace());
            }
            if (failure[0] instanceof Exception e) {
                throw e;
            }
            if (failure[0] != null) {
                throw new InternalException(failure[0].toString());
            }
            String key = UUID.randomUUID().toString();
            results.put(key, value[0] == null ? NULL : value[0]);
            return key;
        }

        /** Stops the running snippet: an interrupt, then force for one that goes on. */
        @Override
        @SuppressWarnings({"deprecation", "removal"})
        public void stop() {
            stopped = true;
            Thread t = running;
            if (t == null) {
                return;
            }
            t.interrupt();
            Thread enforcer = new Thread(() -> {
                try {
                    t.join(500);
                } catch (InterruptedException e) {
                    return;
                }
                try {
                    if (t.isAlive()) {
                        t.stop();
                    }
                } catch (UnsupportedOperationException e) {
                    // Java 20 and later: the server kills the JVM instead.
                }
            });
            enforcer.setDaemon(true);
            enforcer.start();
        }
    }

    /** The JSON the protocol needs: objects of strings, numbers, booleans, null and objects. */
    private static final class Json {
        private final String s;
        private int i;

        private Json(String s) {
            this.s = s;
        }

        static String object(Object... kv) {
            Map<String, Object> m = new LinkedHashMap<>();
            for (int j = 0; j < kv.length; j += 2) {
                m.put((String) kv[j], kv[j + 1]);
            }
            StringBuilder out = new StringBuilder();
            write(out, m);
            return out.toString();
        }

        private static void write(StringBuilder out, Object v) {
            if (v == null) {
                out.append("null");
            } else if (v instanceof Map<?, ?> m) {
                out.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : m.entrySet()) {
                    out.append(first ? "" : ",");
                    first = false;
                    write(out, String.valueOf(e.getKey()));
                    out.append(':');
                    write(out, e.getValue());
                }
                out.append('}');
            } else {
                String str = v.toString();
                out.append('"');
                for (int j = 0; j < str.length(); j++) {
                    char c = str.charAt(j);
                    switch (c) {
                        case '"' -> out.append("\\\"");
                        case '\\' -> out.append("\\\\");
                        case '\n' -> out.append("\\n");
                        case '\r' -> out.append("\\r");
                        case '\t' -> out.append("\\t");
                        default -> {
                            if (c < 0x20) {
                                out.append(String.format("\\u%04x", (int) c));
                            } else {
                                out.append(c);
                            }
                        }
                    }
                }
                out.append('"');
            }
        }

        @SuppressWarnings("unchecked")
        static Map<String, Object> parseObject(String s) {
            return (Map<String, Object>) new Json(s).value();
        }

        /** A JSON object of strings and nulls as a map. */
        static Map<String, String> stringMap(Object v) {
            Map<String, String> out = new LinkedHashMap<>();
            if (v instanceof Map<?, ?> m) {
                m.forEach((k, x) -> out.put((String) k, (String) x));
            }
            return out;
        }

        private Object value() {
            skipSpace();
            char c = s.charAt(i);
            switch (c) {
                case '{' -> {
                    i++;
                    Map<String, Object> m = new LinkedHashMap<>();
                    skipSpace();
                    if (s.charAt(i) == '}') {
                        i++;
                        return m;
                    }
                    while (true) {
                        skipSpace();
                        String k = string();
                        skipSpace();
                        expect(':');
                        m.put(k, value());
                        skipSpace();
                        if (s.charAt(i++) == '}') {
                            return m;
                        }
                    }
                }
                case '"' -> {
                    return string();
                }
                case 'n' -> {
                    i += 4;
                    return null;
                }
                case 't' -> {
                    i += 4;
                    return true;
                }
                case 'f' -> {
                    i += 5;
                    return false;
                }
                default -> {
                    int start = i;
                    while (i < s.length() && "+-.eE0123456789".indexOf(s.charAt(i)) >= 0) {
                        i++;
                    }
                    return Double.parseDouble(s.substring(start, i));
                }
            }
        }

        private String string() {
            expect('"');
            StringBuilder out = new StringBuilder();
            for (char c; (c = s.charAt(i++)) != '"'; ) {
                if (c != '\\') {
                    out.append(c);
                    continue;
                }
                char e = s.charAt(i++);
                switch (e) {
                    case 'b' -> out.append('\b');
                    case 'f' -> out.append('\f');
                    case 'n' -> out.append('\n');
                    case 'r' -> out.append('\r');
                    case 't' -> out.append('\t');
                    case 'u' -> {
                        out.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
                        i += 4;
                    }
                    default -> out.append(e); // \" \\ \/
                }
            }
            return out.toString();
        }

        private void expect(char c) {
            if (s.charAt(i++) != c) {
                throw new IllegalArgumentException("expected '" + c + "' at " + (i - 1) + " of " + s);
            }
        }

        private void skipSpace() {
            while (i < s.length() && Character.isWhitespace(s.charAt(i))) {
                i++;
            }
        }
    }
}
