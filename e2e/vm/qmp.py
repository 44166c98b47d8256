"""qemu's QMP monitor over a unix socket: the one client of qmp-save.py and qmp-faults.py."""
import json
import socket


class Qmp:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(path)
        self.f = self.sock.makefile("rw")
        self.read()  # the greeting
        self.cmd("qmp_capabilities")

    def read(self):
        line = self.f.readline()
        if not line:
            raise EOFError("qemu closed the QMP socket")
        return json.loads(line)

    def cmd(self, name, **args):
        """Runs one command and returns its reply; events in between are skipped."""
        msg = {"execute": name}
        if args:
            msg["arguments"] = args
        self.f.write(json.dumps(msg) + "\n")
        self.f.flush()
        while True:
            m = self.read()
            if "return" in m:
                return m["return"]
            if "error" in m:
                raise RuntimeError(f"{name}: {m['error'].get('desc', m['error'])}")
