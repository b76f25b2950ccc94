"""Unit tests of check.py and oci.py: the real manifests pass, deliberately broken ones fail.

Run: python -m unittest discover -s envoy/k8s -p 'test_*.py'  (make k8s-check does). The Envoy
tests need ENVOY_BIN and GRAPHQL_CACHE_WASM (the Makefile exports both).
"""

import copy
import hashlib
import json
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import check  # noqa: E402
import oci  # noqa: E402

_read, _json = check._read, check._json
SCHEMAS = check.Schemas()
CEL = check.Cel()


def docs_of(rel):
    return check.load_docs(os.path.join(HERE, rel))


def all_docs():
    out = []
    for f in check.manifest_files():
        out += check.load_docs(f)
    return out


def validate(obj, path="istio/gateway.yaml"):
    errors = check.Errors()
    check.validate_object(check.Doc(os.path.join(HERE, path), 0, obj), SCHEMAS, CEL, errors)
    return errors


def find(docs, kind, name=None):
    return next(d for d in docs if d.kind == kind and (name is None or d.name == name))


def istio_ext(obj):
    """The wasm typed_config of the EXTENSION_CONFIG patch of an EnvoyFilter object."""
    cp = next(c for c in obj["spec"]["configPatches"] if c["applyTo"] == "EXTENSION_CONFIG")
    return cp["patch"]["value"]["typed_config"]


class RealManifests(unittest.TestCase):
    def test_every_manifest_passes_schemas_cel_and_semantics(self):
        errors = check.Errors()
        docs, cel = check.check_manifests(check.manifest_files(), errors, SCHEMAS, check.Cel())
        check.check_semantics(docs, errors)
        self.assertEqual(list(errors), [])
        self.assertGreater(len(docs), 20)
        self.assertGreater(cel.evaluated, 50, "CEL rules must actually be evaluated")

    def test_every_kind_used_has_a_vendored_schema(self):
        for d in all_docs():
            known = (d.obj["apiVersion"], d.kind) in check.BUILTIN or SCHEMAS.lookup(d.obj["apiVersion"], d.kind)
            self.assertTrue(known, d.where)


class BrokenManifests(unittest.TestCase):
    def setUp(self):
        self.ef = copy.deepcopy(find(docs_of("istio/gateway.yaml"), "EnvoyFilter", "graphql-cache").obj)
        self.eep = copy.deepcopy(find(docs_of("envoy-gateway/extension-image.yaml"), "EnvoyExtensionPolicy").obj)

    def assertFails(self, errors, needle):
        self.assertTrue(errors, "expected a failure mentioning %r" % needle)
        self.assertTrue(any(needle in e for e in errors), "no error mentions %r: %s" % (needle, list(errors)))

    def test_unknown_field_fails(self):
        self.ef["spec"]["configPatchs"] = self.ef["spec"].pop("configPatches")
        self.assertFails(validate(self.ef), "unknown field 'configPatchs'")

    def test_unknown_nested_field_fails(self):
        self.eep["spec"]["wasm"][0]["rootId"] = self.eep["spec"]["wasm"][0].pop("rootID")
        self.assertFails(validate(self.eep, "envoy-gateway/extension-image.yaml"), "unknown field 'rootId'")

    def test_wrong_kind_fails(self):
        self.ef["kind"] = "EnvoyFiltre"
        self.assertFails(validate(self.ef), "no CRD for apiVersion networking.istio.io/v1alpha3 kind EnvoyFiltre")

    def test_wrong_api_version_fails(self):
        self.ef["apiVersion"] = "networking.istio.io/v1"
        self.assertFails(validate(self.ef), "no CRD for apiVersion networking.istio.io/v1 kind EnvoyFilter")

    def test_wrong_type_fails(self):
        self.eep["spec"]["wasm"][0]["failOpen"] = "no"
        self.assertFails(validate(self.eep, "envoy-gateway/extension-image.yaml"), "'no' is not of type 'boolean'")

    def test_wrong_enum_fails(self):
        self.ef["spec"]["configPatches"][0]["applyTo"] = "EXTENSION"
        self.assertFails(validate(self.ef), "is not one of")

    def test_cel_rule_fails(self):
        # "If type is HTTP, http field needs to be set." (and image must not be)
        self.eep["spec"]["wasm"][0]["code"]["type"] = "HTTP"
        self.assertFails(validate(self.eep, "envoy-gateway/extension-image.yaml"), "CEL rule failed: If type is HTTP")

    def test_cel_rule_on_envoyfilter_fails(self):
        self.ef["spec"]["targetRefs"] = [{"kind": "Gateway", "name": "x"}]
        self.assertFails(validate(self.ef), "only one of targetRefs or workloadSelector can be set")

    def test_cel_rule_on_targetrefs_fails(self):
        self.eep["spec"]["targetRefs"][0]["kind"] = "Service"
        self.assertFails(validate(self.eep, "envoy-gateway/extension-image.yaml"), "targetRefs[*].kind")

    def test_missing_namespace_fails(self):
        del self.ef["metadata"]["namespace"]
        self.assertFails(validate(self.ef), "metadata.namespace missing")

    def test_builtin_kind_is_strict(self):
        dep = copy.deepcopy(find(docs_of("l2/l2.yaml"), "Deployment").obj)
        dep["spec"]["replica"] = dep["spec"].pop("replicas")
        self.assertFails(validate(dep, "l2/l2.yaml"), "Kubernetes 1.37.0 schema")


class BrokenSemantics(unittest.TestCase):
    def run_semantics(self, mutate):
        docs = all_docs()
        mutate(docs)
        errors = check.Errors()
        check.check_semantics(docs, errors)
        return errors

    def assertFails(self, errors, needle):
        self.assertTrue(any(needle in e for e in errors), "no error mentions %r: %s" % (needle, list(errors)))

    def gateway_ext(self, docs):
        ef = next(d for d in docs if d.kind == "EnvoyFilter" and d.path.endswith("gateway.yaml") and d.name == "graphql-cache")
        return istio_ext(ef.obj)

    def set_conf(self, docs, **changes):
        tc = self.gateway_ext(docs)
        conf = json.loads(tc["config"]["configuration"]["value"])
        for k, v in changes.items():
            target = conf
            *head, last = k.split("__")
            for h in head:
                target = target[h]
            target[last] = v
        tc["config"]["configuration"]["value"] = json.dumps(conf)

    def test_allow_on_headers_stop_iteration_is_required(self):
        errs = self.run_semantics(lambda d: self.gateway_ext(d)["config"].update(allow_on_headers_stop_iteration=False))
        self.assertFails(errs, "allow_on_headers_stop_iteration must be true")

    def test_vm_id_is_required(self):
        errs = self.run_semantics(lambda d: self.gateway_ext(d)["config"]["vm_config"].pop("vm_id"))
        self.assertFails(errs, "vm_id must be set")

    def test_code_must_be_oci(self):
        errs = self.run_semantics(
            lambda d: self.gateway_ext(d)["config"]["vm_config"]["code"]["remote"]["http_uri"].update(uri="https://x/y.wasm"))
        self.assertFails(errs, "oci:// image")

    def test_l2_cluster_must_be_a_service_port(self):
        errs = self.run_semantics(lambda d: self.set_conf(d, l2__cluster="outbound|9999||graphql-cache-l2.graphql-cache.svc.cluster.local"))
        self.assertFails(errs, "no Service or ServiceEntry")

    def test_l2_cluster_must_be_an_istio_name(self):
        errs = self.run_semantics(lambda d: self.set_conf(d, l2__cluster="graphql_cache_l2"))
        self.assertFails(errs, "is not an Istio cluster name")

    def test_istio_payload_key(self):
        errs = self.run_semantics(lambda d: self.set_conf(d, identity__payload_key="jwt_payload"))
        self.assertFails(errs, 'payload_key must be "payload"')

    def test_ecds_name_must_match(self):
        def mutate(docs):
            ef = next(d for d in docs if d.kind == "EnvoyFilter" and d.path.endswith("sidecar.yaml") and d.name == "graphql-cache")
            ef.obj["spec"]["configPatches"][1]["patch"]["value"]["name"] = "other"
        self.assertFails(self.run_semantics(mutate), "no EXTENSION_CONFIG patch before it adds")

    def test_rbac_fallback_type_url(self):
        def mutate(docs):
            ef = next(d for d in docs if d.kind == "EnvoyFilter" and d.path.endswith("sidecar.yaml") and d.name == "graphql-cache")
            ef.obj["spec"]["configPatches"][1]["patch"]["value"]["config_discovery"]["type_urls"].pop()
        self.assertFails(self.run_semantics(mutate), "type_urls must include")

    def test_eg_patch_must_name_the_generated_filter(self):
        def mutate(docs):
            epp = next(d for d in docs if d.kind == "EnvoyPatchPolicy")
            op = epp.obj["spec"]["jsonPatches"][0]["operation"]
            op["jsonPath"] = op["jsonPath"].replace("/wasm/0", "/wasm/1")
        self.assertFails(self.run_semantics(mutate), "is not one Envoy Gateway generates")

    def test_eg_patch_must_name_the_generated_listener(self):
        def mutate(docs):
            next(d for d in docs if d.kind == "EnvoyPatchPolicy").obj["spec"]["jsonPatches"][0]["name"] = "tcp-80"
        self.assertFails(self.run_semantics(mutate), "listener 'tcp-80'")

    def test_eg_filter_order_needs_the_envoyproxy(self):
        def mutate(docs):
            next(d for d in docs if d.kind == "EnvoyProxy").obj["spec"]["filterOrder"] = []
        self.assertFails(self.run_semantics(mutate), "must come before the cache")

    def test_eg_payload_key_is_the_provider_name(self):
        def mutate(docs):
            for d in docs:
                if d.kind == "EnvoyExtensionPolicy":
                    d.obj["spec"]["wasm"][0]["config"]["identity"]["payload_key"] = "payload"
        self.assertFails(self.run_semantics(mutate), "is no SecurityPolicy JWT provider name")

    def test_eg_fail_open_false(self):
        def mutate(docs):
            next(d for d in docs if d.kind == "EnvoyExtensionPolicy").obj["spec"]["wasm"][0]["failOpen"] = True
        self.assertFails(self.run_semantics(mutate), "failOpen must be false")

    def test_envoy_gateway_flag(self):
        def mutate(docs):
            cm = next(d for d in docs if d.kind == "ConfigMap" and d.name == "envoy-gateway-config")
            cm.obj["data"]["envoy-gateway.yaml"] = cm.obj["data"]["envoy-gateway.yaml"].replace("enableEnvoyPatchPolicy", "enablePatchPolicy")
        self.assertFails(self.run_semantics(mutate), "enableEnvoyPatchPolicy must be true")

    def test_l2_redis_host(self):
        def mutate(docs):
            dep = next(d for d in docs if d.kind == "Deployment")
            args = dep.obj["spec"]["template"]["spec"]["containers"][0]["args"]
            args[1] = "--redis=redis://redis-master:6379"
        self.assertFails(self.run_semantics(mutate), "is not the Service of a Redis object")


class JsonPath(unittest.TestCase):
    def test_filter_by_name_and_descend(self):
        doc = {"a": {"http_filters": [{"name": "x", "c": {"d": 1}}, {"name": "y", "c": {"d": 2}}]}}
        self.assertEqual(check.jsonpath_pointers(doc, "..http_filters[?(@.name == 'y')].c"), [["a", "http_filters", "1", "c"]])
        self.assertEqual(check.jsonpath_pointers(doc, "..http_filters[?(@.name == 'z')].c"), [])
        with self.assertRaises(ValueError):
            check.jsonpath_pointers(doc, "$.a")

    def test_eg_sort(self):
        names = ["envoy.filters.http.router", "envoy.filters.http.local_ratelimit", "envoy.filters.http.wasm/a", "envoy.filters.http.jwt_authn"]
        self.assertEqual(check.eg_sort_filters(names, []),
                         ["envoy.filters.http.jwt_authn", "envoy.filters.http.wasm/a", "envoy.filters.http.local_ratelimit", "envoy.filters.http.router"])
        moved = check.eg_sort_filters(names, [{"name": "envoy.filters.http.local_ratelimit", "before": "envoy.filters.http.wasm"}])
        self.assertEqual(moved[1], "envoy.filters.http.local_ratelimit")


FAKE_WASM = b"\0asm\x01\0\0\0" + bytes(range(256)) * 8


class Oci(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="oci-test-")
        self.wasm = os.path.join(self.tmp, "plugin-src.wasm")
        with open(self.wasm, "wb") as f:
            f.write(FAKE_WASM)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def build(self, out="out"):
        return oci.write(os.path.join(self.tmp, out), self.wasm, "0.1.0")

    def checked(self, out="out"):
        errors = check.Errors()
        check.check_oci(os.path.join(self.tmp, out), self.wasm, errors)
        return errors

    def test_layout_passes_and_is_reproducible(self):
        os.makedirs(os.path.join(self.tmp, "a"))
        os.makedirs(os.path.join(self.tmp, "b"))
        a, b = self.build("a"), self.build("b")
        self.assertEqual(a["manifest_digest"], b["manifest_digest"])
        self.assertEqual(a["wasm_sha256"], hashlib.sha256(FAKE_WASM).hexdigest())
        with open(a["archive"], "rb") as fa, open(b["archive"], "rb") as fb:
            self.assertEqual(fa.read(), fb.read(), "the oci-archive must be byte-identical")
        self.assertEqual(list(self.checked("a")), [])

    def test_another_wasm_another_digest(self):
        d1 = oci.build(FAKE_WASM, "t")[2]["manifest_digest"]
        d2 = oci.build(FAKE_WASM + b"\0", "t")[2]["manifest_digest"]
        self.assertNotEqual(d1, d2)

    def rewrite_manifest(self, mutate):
        os.makedirs(os.path.join(self.tmp, "out"), exist_ok=True)
        s = self.build()
        layout = s["layout"]
        index = _json(os.path.join(layout, "index.json"))
        old = index["manifests"][0]["digest"][7:]
        man = _json(os.path.join(layout, "blobs", "sha256", old))
        mutate(man, layout)
        data = oci.canonical_json(man)
        os.remove(os.path.join(layout, "blobs", "sha256", old))
        with open(os.path.join(layout, "blobs", "sha256", hashlib.sha256(data).hexdigest()), "wb") as f:
            f.write(data)
        index["manifests"][0].update(digest="sha256:" + hashlib.sha256(data).hexdigest(), size=len(data))
        with open(os.path.join(layout, "index.json"), "wb") as f:
            f.write(oci.canonical_json(index))
        return self.checked()

    def assertFails(self, errors, needle):
        self.assertTrue(any(needle in e for e in errors), "no error mentions %r: %s" % (needle, list(errors)))

    def test_two_layers_fail(self):
        errs = self.rewrite_manifest(lambda m, _: m["layers"].append(dict(m["layers"][0])))
        self.assertFails(errs, "exactly one layer")

    def test_wasm_media_type_fails(self):
        # The CNCF / oras style single layer of application/wasm is not the compat variant.
        errs = self.rewrite_manifest(lambda m, _: m["layers"][0].update(mediaType="application/vnd.wasm.content.layer.v1+wasm"))
        self.assertFails(errs, "expected 'application/vnd.oci.image.layer.v1.tar+gzip'")

    def test_missing_annotation_fails(self):
        errs = self.rewrite_manifest(lambda m, _: m.pop("annotations"))
        self.assertFails(errs, "module.wasm.image/variant=compat missing")

    def test_corrupt_blob_fails(self):
        def corrupt(m, layout):
            p = os.path.join(layout, "blobs", "sha256", m["layers"][0]["digest"][7:])
            data = bytearray(_read(p))
            data[-1] ^= 1
            with open(p, "wb") as f:
                f.write(bytes(data))
        self.assertFails(self.rewrite_manifest(corrupt), "content does not match its digest")

    def test_stale_layout_fails(self):
        os.makedirs(os.path.join(self.tmp, "out"))
        self.build()
        with open(self.wasm, "ab") as f:
            f.write(b"\0")
        self.assertFails(self.checked(), "plugin.wasm is not")


@unittest.skipUnless(os.environ.get("ENVOY_BIN") and os.path.exists(os.environ.get("GRAPHQL_CACHE_WASM", "")),
                     "needs ENVOY_BIN and GRAPHQL_CACHE_WASM")
class EnvoyValidate(unittest.TestCase):
    def test_a_bad_filter_configuration_fails_envoy_validate(self):
        docs = docs_of("istio/gateway.yaml")
        tc = istio_ext(find(docs, "EnvoyFilter", "graphql-cache").obj)
        conf = json.loads(tc["config"]["configuration"]["value"])
        conf["ttl_seconds"] = "thirty"
        tc["config"]["configuration"]["value"] = json.dumps(conf)
        errors = check.Errors()
        with tempfile.TemporaryDirectory() as tmp:
            check.envoy_validate(os.environ["ENVOY_BIN"], check.istio_bootstrap(docs, os.environ["GRAPHQL_CACHE_WASM"]), "bad", errors, tmp)
        self.assertTrue(any("envoy --mode validate failed" in e for e in errors), list(errors))

    def test_a_bad_eg_filter_configuration_fails_envoy_validate(self):
        # The generated wasm filter is disabled on the listener (enabled per route), and Envoy
        # still loads the plugin and parses its configuration.
        docs = all_docs()
        eep = find(docs, "EnvoyExtensionPolicy")
        eep.obj["spec"]["wasm"][0]["config"]["l2"]["timeout_ms"] = 0
        errors = check.Errors()
        with tempfile.TemporaryDirectory() as tmp:
            check.envoy_validate(os.environ["ENVOY_BIN"], check.eg_bootstrap(docs, eep, os.environ["GRAPHQL_CACHE_WASM"]), "bad", errors, tmp)
        self.assertTrue(any("Unable to create Wasm plugin" in e for e in errors), list(errors))

    def test_a_bad_eg_patch_fails_envoy_validate(self):
        docs = all_docs()
        epp = find(docs, "EnvoyPatchPolicy")
        epp.obj["spec"]["jsonPatches"][1]["operation"]["path"] = "vm_idd"
        errors = check.Errors()
        with tempfile.TemporaryDirectory() as tmp:
            check.envoy_validate(os.environ["ENVOY_BIN"], check.eg_bootstrap(docs, find(docs, "EnvoyExtensionPolicy"),
                                                                            os.environ["GRAPHQL_CACHE_WASM"]), "bad", errors, tmp)
        self.assertTrue(any("envoy --mode validate failed" in e for e in errors), list(errors))


RUNTIME = all(os.path.exists(os.environ.get(v, "")) for v in ("ENVOY_BIN", "GRAPHQL_CACHE_WASM", "L2_BIN", "ORIGIN_BIN")) \
    and shutil.which("redis-server")


@unittest.skipUnless(RUNTIME, "needs ENVOY_BIN, GRAPHQL_CACHE_WASM, L2_BIN, ORIGIN_BIN and redis-server")
class Runtime(unittest.TestCase):
    def test_a_wrong_payload_key_fails_at_runtime(self):
        # The private query needs the identity from the JWT payload: under the wrong key the
        # filter finds none and passes the query uncached (BYPASS), which the smoke run catches.
        docs = docs_of("istio/gateway.yaml")
        tc = istio_ext(find(docs, "EnvoyFilter", "graphql-cache").obj)
        conf = json.loads(tc["config"]["configuration"]["value"])
        conf["identity"]["payload_key"] = "https://demo.graphql-cache.local"  # the pre-1.24 key
        tc["config"]["configuration"]["value"] = json.dumps(conf)
        tokens = {w: _read(os.path.join(HERE, "..", "tokens", w + ".jwt")).decode().strip() for w in ("alice", "bob")}
        errors = check.Errors()
        with tempfile.TemporaryDirectory() as tmp:
            ran = check.runtime_smoke([("bad", check.istio_bootstrap(docs, os.environ["GRAPHQL_CACHE_WASM"]))],
                                      os.environ["ENVOY_BIN"], os.environ["L2_BIN"], os.environ["ORIGIN_BIN"], tokens, errors, tmp)
        self.assertEqual(ran, ["bad"])
        self.assertTrue(any("runtime: POST queries gave" in e and "BYPASS" in e for e in errors), list(errors))


if __name__ == "__main__":
    unittest.main()
