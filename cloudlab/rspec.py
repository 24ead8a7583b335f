"""Print the RSpec a CloudLab profile makes, here, as the portal would: run it with its parameters.

    .venv/bin/python rspec.py profile.py [NAME=VALUE ...]     # in the profile's repository
    .venv/bin/python rspec.py profile.py nodes=3 image=UBUNTU24-64-STD

CloudLab runs a profile with a Python 3 ``geni.portal`` of its own; PyPI's geni-lib (0.9.9.4, in
requirements-profile.txt) has ``geni.rspec`` but a ``geni.portal`` written in Python 2, which does not
import. This stands in for the part of the portal a profile uses (``Context``: parameters, errors,
the request and its printing; ``ParameterType``; ``ParameterError``), then runs the profile as
``__main__`` as the portal does. A parameter not given takes its default; a value the profile
refuses is printed with its parameter, and the exit status is 1, as the portal refuses it.
"""

import argparse
import runpy
import sys
import types

import geni
import geni.rspec.pg as pg

TYPES = {
    "integer": int,
    "string": str,
    "image": str,
    "nodetype": str,
    "lantype": str,
    "aggregate": str,
    "bandwidth": float,
    "latency": float,
    "size": str,
    "pubkey": str,
    "boolean": lambda v: v if isinstance(v, bool) else str(v).lower() in ("1", "true", "yes", "on"),
}


class ParameterType:
    INTEGER, STRING, BOOLEAN, IMAGE = "integer", "string", "boolean", "image"
    AGGREGATE, NODETYPE, LANTYPE, BANDWIDTH, LATENCY, SIZE, PUBKEY = (
        "aggregate",
        "nodetype",
        "lantype",
        "bandwidth",
        "latency",
        "size",
        "pubkey",
    )


class ParameterError(Exception):
    def __init__(self, message, paramList):
        super().__init__(message)
        self.message, self.params = message, list(paramList)


class ParameterWarning(ParameterError):
    pass


class Context:
    """The portal's context, bound to the values of ``VALUES`` (NAME=VALUE arguments)."""

    VALUES: dict = {}

    def __init__(self):
        self.defined, self.errors, self.warnings, self.printed = {}, [], [], False

    def defineParameter(
        self,
        name,
        description,
        typ,
        defaultValue,
        legalValues=None,
        longDescription=None,
        advanced=False,
        groupId=None,
        hide=False,
        prefix="emulab.net.parameter.",
        **_,
    ):
        legal = [v[0] if isinstance(v, (tuple, list)) else v for v in (legalValues or [])]
        self.defined[name] = (typ, defaultValue, legal)

    def defineParameterGroup(self, groupId, groupName):
        pass

    def bindParameters(self, altParamSrc=None):
        unknown = sorted(set(self.VALUES) - set(self.defined))
        if unknown:
            raise SystemExit(
                f"rspec.py: the profile has no parameter {', '.join(unknown)} (it has: {', '.join(self.defined)})"
            )
        values = {}
        for name, (typ, default, legal) in self.defined.items():
            value = TYPES.get(typ, str)(self.VALUES[name]) if name in self.VALUES else default
            if legal and value not in legal:
                raise SystemExit(
                    f"rspec.py: {name}={value!r} is not one the portal offers ({', '.join(map(str, legal))})"
                )
            values[name] = value
        return argparse.Namespace(**values)

    def reportError(self, parameterError, immediate=False):
        self.errors.append(parameterError)
        if immediate:
            self.verifyParameters()

    def reportWarning(self, parameterWarning):
        self.warnings.append(parameterWarning)

    def verifyParameters(self):
        for w in self.warnings:
            print(f"warning: {', '.join(w.params)}: {w.message}", file=sys.stderr)
        if self.errors:
            for e in self.errors:
                print(f"error: {', '.join(e.params)}: {e.message}", file=sys.stderr)
            raise SystemExit(1)

    def makeRequestRSpec(self):
        return pg.Request()

    def printRequestRSpec(self, rspec=None):
        print(rspec.toXMLString(pretty_print=True, ucode=True))
        self.printed = True

    def suppressAutoPrint(self):
        pass

    def makeParameterWarningsFatal(self):
        pass


def portal_module() -> types.ModuleType:
    """A ``geni.portal`` module made of the classes above."""
    module = types.ModuleType("geni.portal")
    for name in ("Context", "ParameterType", "ParameterError", "ParameterWarning"):
        setattr(module, name, globals()[name])
    module.context = None
    return module


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="rspec.py")
    parser.add_argument("profile", help="the profile (profile.py at a profile repository's top level)")
    parser.add_argument("values", nargs="*", metavar="NAME=VALUE", help="a parameter's value (default: its default)")
    args = parser.parse_args(argv)
    bad = [v for v in args.values if "=" not in v]
    if bad:
        parser.error(f"give parameters as NAME=VALUE, not {' '.join(bad)}")
    Context.VALUES = dict(v.split("=", 1) for v in args.values)
    module = portal_module()
    module.context = Context()
    sys.modules["geni.portal"] = geni.portal = module
    sys.argv = [args.profile]
    runpy.run_path(args.profile, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
