"""Test driver for startup.py: starts a real ipykernel with the startup file,
runs cells, and prints what the kernel published as JSON.

Usage: python3 check.py [KERNEL_FLAG...] < request.json

The kernel is started as "python3 -m ipykernel_launcher -f CONN KERNEL_FLAG..."
(the Go test passes pystartup.ExecFilesFlag).

request.json: {"cells": [{"name": str, "code": str}], "block": [module, ...]}
"block" names modules the kernel must fail to import, to check that startup
survives their absence.

Output: {"cells": {name: {"status": str, "outputs": [...]}}, "stderr": str}
where each output is {"msg_type", "data"} for display_data/execute_result,
{"msg_type", "name", "text"} for stream and {"msg_type", "ename", "evalue",
"traceback"} for error. "stderr" is the kernel process's own stderr.
"""

import json
import os
import sys
import tempfile

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

BLOCKER = """\
import sys


class Blocker:
    names = %r

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError("No module named %%r" %% fullname, name=fullname)
        return None


sys.meta_path.insert(0, Blocker())
"""


def main():
    flags = sys.argv[1:]
    request = json.load(sys.stdin)
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(run(tmp, flags, request)))


def run(tmp, flags, request):
    kernels = os.path.join(tmp, "kernels")
    os.makedirs(os.path.join(kernels, "sandbox"))
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"] + flags
    with open(os.path.join(kernels, "sandbox", "kernel.json"), "w") as f:
        json.dump({"argv": argv, "display_name": "sandbox", "language": "python"}, f)

    env = dict(os.environ)
    env.pop("MPLBACKEND", None)
    env["IPYTHONDIR"] = os.path.join(tmp, "ipython")
    env["MPLCONFIGDIR"] = os.path.join(tmp, "matplotlib")
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    if request.get("block"):
        site = os.path.join(tmp, "site")
        os.makedirs(site)
        with open(os.path.join(site, "sitecustomize.py"), "w") as f:
            f.write(BLOCKER % (list(request["block"]),))
        env["PYTHONPATH"] = site

    ksm = KernelSpecManager(kernel_dirs=[kernels])
    km = KernelManager(kernel_name="sandbox", kernel_spec_manager=ksm)
    stderr_path = os.path.join(tmp, "kernel.stderr")
    cells = {}
    with open(stderr_path, "w") as stderr:
        km.start_kernel(env=env, stderr=stderr, cwd=tmp)
        try:
            kc = km.client()
            kc.start_channels()
            try:
                kc.wait_for_ready(timeout=60)
                for cell in request["cells"]:
                    cells[cell["name"]] = execute(kc, cell["code"])
            finally:
                kc.stop_channels()
        finally:
            km.shutdown_kernel(now=True)
    with open(stderr_path) as f:
        return {"cells": cells, "stderr": f.read()}


def execute(kc, code):
    outputs = []

    def hook(msg):
        kind = msg["msg_type"]
        content = msg["content"]
        if kind in ("display_data", "execute_result"):
            outputs.append({"msg_type": kind, "data": content["data"]})
        elif kind == "stream":
            outputs.append({"msg_type": kind, "name": content["name"], "text": content["text"]})
        elif kind == "error":
            outputs.append(
                {
                    "msg_type": kind,
                    "ename": content["ename"],
                    "evalue": content["evalue"],
                    "traceback": content["traceback"],
                }
            )

    # stop_on_error=False as the server sends it: otherwise ipykernel
    # aborts a request that arrives just after an error (the next cell).
    reply = kc.execute_interactive(code, output_hook=hook, timeout=120, allow_stdin=False, stop_on_error=False)
    return {"status": reply["content"]["status"], "outputs": outputs}


if __name__ == "__main__":
    main()
