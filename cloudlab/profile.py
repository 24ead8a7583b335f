"""labkit: the course's distributed TensorFlow labs on a small cluster. node0 runs JupyterLab and
the notebooks; the other nodes run the TensorFlow tasks the notebooks start over ssh. Every node
boots with the kit installed in your home (`~/labkit`), its datasets fetched, passwordless ssh to
the other nodes, and on node0 the hosts file the labs take (`~/hosts.txt`).

Instructions:
Wait until every node's status is **Finished** (setting up takes about 10 minutes), then log in
to node0 (List View: its ssh command) with your agent forwarded (`ssh -A`) and check:

```
ls ~/.labkit-ready/                                   # node0 node1 ...: each node whose setup is done
cd ~/labkit && .venv/bin/python -m labkit nodes check --hosts ~/hosts.txt
```

node0 writes `~/hosts.txt` once every node is ready (its log says which are not).

Open JupyterLab through an ssh tunnel (`ssh -L 8888:localhost:8888 you@node0...`, then
`cd ~/labkit && make lab` on node0) and set `hosts_file = "/users/<you>/hosts.txt"` in a lab's parameters.

The setup log of each node is `/local/labkit-startup.log`. Rebooting a node keeps `~/labkit`:
the setup never overwrites a student's notebooks. After the course's kit changes,
`cd ~/labkit && make cloudlab-update` on node0 brings every node's kit up to date, notebooks
left as they are. With a shared folder (`shared_gb`), `/mydata`
is node0's disk, mounted on every node: keep data and results to share there.

The experiment is deleted when it expires, with every node's disk: copy the work you want to
keep (`scp -r you@node0...:labkit/notebooks .`) before then, and extend the experiment from
its page (Extend) while it runs.
"""

import collections

import geni.rspec.igext as igext
import geni.rspec.pg as pg

URN = "urn:publicid:IDN+emulab.net+image+emulab-ops//"
# CloudLab's Ubuntu images, each with its own Python 3. TensorFlow 2.21 has wheels for Python
# 3.10 to 3.13, but requirements.txt's numpy 2.4 and pandas 3.1 need 3.11 or newer, so an image
# whose Python is older is refused, with the reason (startup.sh checks the same on the node).
Image = collections.namedtuple("Image", "python refused")
IMAGES = {
    "UBUNTU24-64-STD": Image("python3.12", ""),
    "UBUNTU22-64-STD": Image(
        "python3.10",
        "Ubuntu 22.04's Python is 3.10, and the kit's pinned numpy 2.4 "
        "and pandas 3.1 need Python 3.11 or newer: choose UBUNTU24-64-STD",
    ),
}
LAN_PREFIX = "10.10.1."  # node i is 10.10.1.(i + 1), as the guide's hosts file expects
NETMASK = "255.255.255.0"
STARTUP = "/local/repository/startup.sh"  # profile.py and startup.sh sit at the repository's top
LOG = "/local/labkit-startup.log"
SHARED = "/mydata"

Parameter = collections.namedtuple("Parameter", "name description type default legal")
PARAMETERS = [
    Parameter("nodes", "Number of nodes (node0 runs JupyterLab; the labs use 3 to 6)", "INTEGER", 4, None),
    Parameter("hardware", "Hardware type, such as m510 or c220g5 (empty: any available)", "STRING", "", None),
    Parameter(
        "image", "Disk image (Ubuntu 24.04: its Python 3.12 runs the kit)", "IMAGE", "UBUNTU24-64-STD", sorted(IMAGES)
    ),
    Parameter(
        "shared_gb",
        "Size in GB of a shared folder /mydata on node0's disk, mounted on every node over NFS (0: none)",
        "INTEGER",
        0,
        None,
    ),
    Parameter(
        "mirror",
        "Course data mirror: a base URL holding mnist/ and a9a/ (empty: the public mirrors)",
        "STRING",
        "",
        None,
    ),
]


def check(params) -> list:
    """What is wrong with ``params`` (an object with the parameters as attributes): (name, message)."""
    errors = []
    if not 1 <= int(params.nodes) <= 16:
        errors.append(("nodes", "choose 1 to 16 nodes (the labs use 3 to 6)"))
    image = IMAGES.get(params.image)
    if image is None:
        errors.append(("image", "choose one of " + ", ".join(sorted(IMAGES))))
    elif image.refused:
        errors.append(("image", image.refused))
    if not 0 <= int(params.shared_gb) <= 1000:
        errors.append(("shared_gb", "choose 0 (no shared folder) to 1000 GB"))
    return errors


def startup_command(params, index: int) -> str:
    """The command every node runs at every boot (startup.sh leaves what is already set up)."""
    args = ["--node", "node%d" % index, "--nodes", str(int(params.nodes)), "--log", LOG]
    if int(params.shared_gb):
        args += ["--shared", SHARED]
    if params.mirror:
        args += ["--mirror", params.mirror]
    return "sudo bash %s %s" % (STARTUP, " ".join(args))


def tour():
    """What the portal shows: this file's docstring, split at its 'Instructions:' line."""
    description, instructions = __doc__.split("\nInstructions:\n")
    t = igext.Tour()
    t.Description(igext.Tour.MARKDOWN, description.strip())
    t.Instructions(igext.Tour.MARKDOWN, instructions.strip())
    return t


def build(params, request=None):
    """The experiment's RSpec: ``params.nodes`` raw PCs node0, node1, ... on one LAN with the
    addresses 10.10.1.1, ..., each running the startup command; node0 with a blockstore on
    /mydata when ``params.shared_gb``."""
    request = request if request is not None else pg.Request()
    lan = request.LAN("lan")
    lan.best_effort = True
    for i in range(int(params.nodes)):
        node = request.RawPC("node%d" % i)
        node.disk_image = URN + params.image
        if params.hardware:
            node.hardware_type = params.hardware
        iface = node.addInterface("if1")
        iface.addAddress(pg.IPv4Address(LAN_PREFIX + str(i + 1), NETMASK))
        lan.addInterface(iface)
        if i == 0 and int(params.shared_gb):
            store = node.Blockstore("shared", SHARED)
            store.size = "%dGB" % int(params.shared_gb)
        node.addService(pg.Execute(shell="bash", command=startup_command(params, i)))
    request.addTour(tour())
    return request


def main():
    """The portal's side: declare the parameters, check them, print the RSpec (CloudLab's own
    geni.portal; here, rspec.py's)."""
    import geni.portal as portal

    context = portal.Context()
    for p in PARAMETERS:
        kind = getattr(portal.ParameterType, p.type)
        if p.legal:
            context.defineParameter(p.name, p.description, kind, p.default, p.legal)
        else:
            context.defineParameter(p.name, p.description, kind, p.default)
    params = context.bindParameters()
    for name, message in check(params):
        context.reportError(portal.ParameterError(message, [name]))
    context.verifyParameters()
    context.printRequestRSpec(build(params, context.makeRequestRSpec()))


if __name__ == "__main__":
    main()
