// kernel.js is the JavaScript runtime of the code interpreter: a persistent
// Node.js process that runs cells in its own global scope, so variables,
// functions and imported modules carry over from one cell to the next.
//
// It speaks the kernel protocol of ProcessRuntime (process.go): requests
// on fd 3, messages on fd 4, JSON lines.
// process.stdout/stderr.write (and so console.*) are turned into stdout and
// stderr messages of the running cell. Before "end" the kernel writes a
// marker line (mark + id) to the real fds 1 and 2, so the server knows that
// what child processes wrote there before has arrived.
//
// Cells arrive with their TypeScript types already stripped by the server.
// They are rewritten with acorn (Node's internal copy, hence
// --expose-internals) so that top-level let/const/class become var and can
// be declared again by a later cell, and so that top-level await and import
// declarations work: a cell with either runs as an async function whose
// top-level declarations are hoisted to globals, and every import, a
// declaration or an import() expression, goes through importModule, which
// resolves the specifier from the current working directory (vm scripts
// cannot import by themselves in Node 18). The value of the last
// expression is the result, shown with util.inspect.
//
// SIGINT interrupts: a synchronous cell through vm's breakOnSigint, an
// awaiting one by abandoning the await.
'use strict';

(function kernel() {
  const fs = require('fs');
  const net = require('net');
  const path = require('path');
  const readline = require('readline');
  const url = require('url');
  const util = require('util');
  const vm = require('vm');
  const Module = require('module');

  const IN_FD = 3;
  const OUT_FD = 4;
  // The mark is the one argument (node -e SCRIPT MARK), kept out of argv.
  const mark = '\x1e' + process.argv.splice(1, 1)[0] + ':';

  let acorn = null;
  let walk = null;
  try {
    acorn = require('internal/deps/acorn/acorn/dist/acorn');
    walk = require('internal/deps/acorn/acorn-walk/dist/walk');
  } catch {
    // Without acorn cells run unchanged.
  }

  const sleepCell = new Int32Array(new SharedArrayBuffer(4));
  function writeAll(fd, text) {
    const buf = Buffer.from(text);
    let off = 0;
    while (off < buf.length) {
      try {
        off += fs.writeSync(fd, buf, off, buf.length - off);
      } catch (e) {
        if (e.code !== 'EAGAIN') throw e;
        Atomics.wait(sleepCell, 0, 0, 1);
      }
    }
  }
  function send(msg) {
    writeAll(OUT_FD, JSON.stringify(msg) + '\n');
  }

  // The cell being run; output outside a cell is dropped, as Jupyter drops
  // output whose parent request has ended.
  let current = null;
  let interruptAwait = null;

  function hook(stream, type) {
    stream.write = function write(chunk, encoding, cb) {
      if (typeof encoding === 'function') {
        cb = encoding;
      }
      const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
      if (current !== null && text !== '') send({ type, id: current, text });
      if (typeof cb === 'function') process.nextTick(cb);
      return true;
    };
  }
  hook(process.stdout, 'stdout');
  hook(process.stderr, 'stderr');

  process.on('SIGINT', () => {
    if (interruptAwait) interruptAwait();
  });
  process.on('uncaughtException', (err) => {
    process.stderr.write('Uncaught ' + (err && err.stack ? err.stack : String(err)) + '\n');
  });
  process.on('unhandledRejection', (reason) => {
    process.stderr.write('Unhandled rejection: ' + (reason && reason.stack ? reason.stack : String(reason)) + '\n');
  });

  // The globals a CommonJS module would see, rooted at the working directory.
  const cwd = process.cwd();
  const filename = path.join(cwd, '[cell].js');
  const userModule = new Module(filename, null);
  userModule.filename = filename;
  userModule.paths = Module._nodeModulePaths(cwd);
  userModule.loaded = true;
  globalThis.require = Module.createRequire(filename);
  globalThis.module = userModule;
  globalThis.exports = userModule.exports;
  globalThis.__filename = filename;
  globalThis.__dirname = cwd;

  function parse(code) {
    const opts = { ecmaVersion: 'latest', allowHashBang: true, allowAwaitOutsideFunction: true };
    try {
      return acorn.parse(code, { ...opts, sourceType: 'script' });
    } catch {
      return acorn.parse(code, { ...opts, sourceType: 'module' });
    }
  }

  function hasTopLevelAwait(ast) {
    let found = false;
    walk.recursive(ast, null, {
      Function() {},
      Class() {},
      AwaitExpression() {
        found = true;
      },
      ForOfStatement(node, st, c) {
        if (node.await) found = true;
        walk.base.ForOfStatement(node, st, c);
      },
    });
    return found || ast.body.some((n) => n.type === 'ImportDeclaration');
  }

  function patternNames(p, out) {
    switch (p.type) {
      case 'Identifier':
        out.push(p.name);
        break;
      case 'ObjectPattern':
        for (const prop of p.properties) patternNames(prop.type === 'RestElement' ? prop.argument : prop.value, out);
        break;
      case 'ArrayPattern':
        for (const el of p.elements) if (el) patternNames(el, out);
        break;
      case 'RestElement':
        patternNames(p.argument, out);
        break;
      case 'AssignmentPattern':
        patternNames(p.left, out);
        break;
    }
    return out;
  }

  // importModule imports a module as an import in a file of the current
  // working directory would: relative paths from it, packages from its
  // node_modules and Node's global folders. What require cannot resolve
  // (an ESM-only package) goes to import() as it is, which says what is
  // missing.
  const IMPORT = '__e2b_import';
  function importModule(specifier) {
    let target = String(specifier);
    try {
      const resolved = Module.createRequire(path.join(process.cwd(), '[cell].js')).resolve(target);
      target = path.isAbsolute(resolved) ? url.pathToFileURL(resolved).href : resolved;
    } catch {
      // Left to import().
    }
    return import(target);
  }
  Object.defineProperty(globalThis, IMPORT, { value: importModule });

  // importCalls turns every import() expression into a call of
  // importModule; it returns the code unchanged when there is none.
  function importCalls(code, ast) {
    const starts = [];
    walk.simple(ast, {
      ImportExpression(node) {
        starts.push(node.start);
      },
    });
    let out = code;
    for (const start of starts.sort((a, b) => b - a)) {
      out = out.slice(0, start) + IMPORT + out.slice(start + 'import'.length);
    }
    return out;
  }

  // rewrite returns the code to run and whether it evaluates to a promise
  // of {value} (an async cell).
  function rewrite(code) {
    if (!acorn) return { code, async: false };
    let ast;
    try {
      ast = parse(code);
      const direct = importCalls(code, ast);
      if (direct !== code) {
        code = direct;
        ast = parse(code);
      }
    } catch {
      return { code, async: false }; // let V8 report the syntax error
    }
    const isAsync = hasTopLevelAwait(ast);
    const src = (n) => code.slice(n.start, n.end);
    const edits = [];
    const hoisted = [];
    const prologue = [];
    let imports = 0;
    for (const node of ast.body) {
      switch (node.type) {
        case 'VariableDeclaration': {
          if (!isAsync) {
            if (node.kind !== 'var') edits.push([node.start, node.start + node.kind.length, 'var']);
            break;
          }
          const parts = [];
          for (const d of node.declarations) {
            hoisted.push(...patternNames(d.id, []));
            if (d.init) parts.push(`(${src(d.id)} = ${src(d.init)})`);
            else if (node.kind !== 'var') parts.push(`(${src(d.id)} = undefined)`);
          }
          edits.push([node.start, node.end, parts.length ? `void (${parts.join(', ')});` : ';']);
          break;
        }
        case 'ClassDeclaration':
          if (isAsync) {
            hoisted.push(node.id.name);
            edits.push([node.start, node.end, `${node.id.name} = ${src(node)};`]);
          } else {
            edits.push([node.start, node.end, `var ${node.id.name} = ${src(node)};`]);
          }
          break;
        case 'FunctionDeclaration':
          if (isAsync) {
            hoisted.push(node.id.name);
            prologue.push(`globalThis[${JSON.stringify(node.id.name)}] = ${node.id.name};`);
          }
          break;
        case 'ImportDeclaration': {
          const tmp = `__e2b_import_${imports++}`;
          const parts = [`const ${tmp} = await ${IMPORT}(${JSON.stringify(node.source.value)});`];
          for (const s of node.specifiers) {
            hoisted.push(s.local.name);
            if (s.type === 'ImportDefaultSpecifier') parts.push(`${s.local.name} = ${tmp}.default;`);
            else if (s.type === 'ImportNamespaceSpecifier') parts.push(`${s.local.name} = ${tmp};`);
            else parts.push(`${s.local.name} = ${tmp}[${JSON.stringify(s.imported.name ?? s.imported.value)}];`);
          }
          edits.push([node.start, node.end, parts.join(' ')]);
          break;
        }
      }
    }
    const last = ast.body[ast.body.length - 1];
    if (isAsync && last && last.type === 'ExpressionStatement') {
      edits.push([last.start, last.end, `return { value: (${src(last.expression)}) };`]);
    }
    let out = code;
    for (const [start, end, text] of edits.sort((a, b) => b[0] - a[0])) {
      out = out.slice(0, start) + text + out.slice(end);
    }
    if (!isAsync) return { code: out, async: false };
    const decl = hoisted.length ? `var ${[...new Set(hoisted)].join(', ')};\n` : '';
    return { code: `${decl}(async () => { ${prologue.join(' ')}\n${out}\n})()`, async: true };
  }

  // cellStack cuts a stack trace where the kernel's own frames begin.
  function cellStack(stack) {
    const lines = String(stack).split('\n');
    const i = lines.findIndex((l) => /^\s+at .*(node:vm:|\[eval\])/.test(l));
    return (i < 0 ? lines : lines.slice(0, i)).join('\n');
  }

  function errorMessage(id, e) {
    if (e !== null && typeof e === 'object' && 'stack' in e) {
      return { type: 'error', id, name: String(e.name || 'Error'), value: String(e.message ?? ''), traceback: cellStack(e.stack) };
    }
    return { type: 'error', id, name: 'Error', value: String(e), traceback: 'Uncaught ' + util.inspect(e) };
  }

  const runOptions = { breakOnSigint: true, displayErrors: false };

  async function execute(msg) {
    const id = msg.id;
    current = id;
    try {
      const cell = rewrite(msg.code);
      let value = vm.runInThisContext(cell.code, { ...runOptions, filename: `<cell ${msg.count}>` });
      if (cell.async) {
        const done = await new Promise((resolve, reject) => {
          interruptAwait = () => reject(new Error('Execution was interrupted'));
          value.then(resolve, reject);
        });
        value = done ? done.value : undefined;
      }
      if (value !== undefined) {
        send({ type: 'result', id, data: { 'text/plain': util.inspect(value) } });
      }
    } catch (e) {
      send(errorMessage(id, e));
    } finally {
      interruptAwait = null;
    }
    writeAll(1, mark + id + '\n');
    writeAll(2, mark + id + '\n');
    current = null;
    send({ type: 'end', id });
  }

  // savedEnv holds, by setenv request id, the values a setenv replaced
  // (null: it was unset), until restoreenv puts them back.
  const savedEnv = new Map();
  function applyEnv(vars) {
    const prev = {};
    for (const [k, v] of Object.entries(vars)) {
      prev[k] = Object.prototype.hasOwnProperty.call(process.env, k) ? process.env[k] : null;
      if (v === null) delete process.env[k];
      else process.env[k] = v;
    }
    return prev;
  }
  function setenv(msg) {
    savedEnv.set(msg.id, applyEnv(msg.vars || {}));
    send({ type: 'env', id: msg.id });
  }
  function restoreenv(msg) {
    const prev = savedEnv.get(msg.token);
    if (prev === undefined) {
      send({ type: 'error', id: msg.id, name: 'Error', value: `no environment saved by request ${msg.token}` });
      return;
    }
    savedEnv.delete(msg.token);
    applyEnv(prev);
    send({ type: 'env', id: msg.id });
  }

  const handlers = { execute, setenv, restoreenv };
  let queue = Promise.resolve();
  const input = new net.Socket({ fd: IN_FD, readable: true, writable: false });
  readline.createInterface({ input, crlfDelay: Infinity }).on('line', (line) => {
    const msg = JSON.parse(line);
    queue = queue.then(() => handlers[msg.type](msg));
  });
  input.on('end', () => process.exit(0));
  send({ type: 'ready' });
})();
