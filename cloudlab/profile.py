"""CloudLab profile for the labkit course: N nodes on one experiment LAN, each set up by
``cloudlab/startup.sh`` (the kit, its Debian packages, the data from the course mirror), with
``~/hosts.txt`` on node0 ready for docs/cluster.md.

Make it a *repository-based* profile from the kit's git repository (CloudLab clones it into
``/local/repository`` on every node), then instantiate it with the parameters below.

The RSpec is built with ``geni.rspec.pg`` alone (``build``); the portal's parameters live in the
thin ``main`` layer, which only CloudLab runs (its ``geni.portal``; PyPI's geni-lib 0.9.9.4 has a
``geni.portal`` that is Python 2 code), so a test builds the same RSpec from plain values.
"""
import collections

import geni.rspec.pg as pg

IMAGES = {  # CloudLab's standard Ubuntu LTS images
    "UBUNTU22-64-STD": "urn:publicid:IDN+emulab.net+image+emulab-ops//UBUNTU22-64-STD",
    "UBUNTU24-64-STD": "urn:publicid:IDN+emulab.net+image+emulab-ops//UBUNTU24-64-STD",
}
LAN_PREFIX = "10.10.1."  # node i is 10.10.1.(i + 1), as the guide's hosts file expects
NETMASK = "255.255.255.0"
STARTUP = "/local/repository/cloudlab/startup.sh"

Parameter = collections.namedtuple("Parameter", "name description type default legal")
PARAMETERS = [
    Parameter("nodes", "Number of nodes (node0 runs JupyterLab and the launcher)", "INTEGER", 4, None),
    Parameter("hardware", "Hardware type (empty: any available)", "STRING", "", None),
    Parameter("image", "Disk image (an Ubuntu LTS image)", "IMAGE", "UBUNTU22-64-STD", sorted(IMAGES)),
    Parameter("mirror", "Course data mirror: a base URL holding mnist/ and a9a/ (empty: the public mirrors)",
              "STRING", "", None),
]


def check(params) -> list:
    """What is wrong with ``params`` (an object with the parameters as attributes): messages."""
    errors = []
    if not 1 <= int(params.nodes) <= 16:
        errors.append(("nodes", "choose 1 to 16 nodes (the labs use 3-6)"))
    if params.image not in IMAGES:
        errors.append(("image", "choose one of " + ", ".join(sorted(IMAGES))))
    return errors


def startup_command(params, index: int) -> str:
    """The command every node runs once it boots."""
    args = ["--node", "node%d" % index, "--nodes", str(int(params.nodes))]
    if params.mirror:
        args += ["--mirror", params.mirror]
    return "sudo bash %s %s > /local/labkit-startup.log 2>&1" % (STARTUP, " ".join(args))


def build(params, request=None):
    """The experiment's RSpec: ``params.nodes`` raw PCs node0, node1, ... on one LAN with the
    addresses 10.10.1.1, ..., each running the startup command."""
    request = request if request is not None else pg.Request()
    lan = request.LAN("lan")
    lan.best_effort = True
    for i in range(int(params.nodes)):
        node = request.RawPC("node%d" % i)
        node.disk_image = IMAGES[params.image]
        if params.hardware:
            node.hardware_type = params.hardware
        iface = node.addInterface("if1")
        iface.addAddress(pg.IPv4Address(LAN_PREFIX + str(i + 1), NETMASK))
        lan.addInterface(iface)
        node.addService(pg.Execute(shell="bash", command=startup_command(params, i)))
    return request


def main():
    """CloudLab's side: declare the parameters in its portal, check them, print the RSpec."""
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
