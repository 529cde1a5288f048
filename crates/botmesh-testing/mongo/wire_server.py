"""A MongoDB wire-protocol server for botmesh's tests.

No real `mongod` can be installed on the development machines, so the Mongo store's tests talk
to this instead: `mockupdb` speaks the wire protocol (OP_MSG, and OP_QUERY for legacy
handshakes) and `mongomock` keeps the data and evaluates filters and update operators. This file
connects the two and answers the commands that the official drivers send and that neither
library answers on its own: the handshake (`hello`, `isMaster`), `ping`, `buildInfo`,
`endSessions`, `find`, `getMore`, `killCursors`, `insert`, `update`, `delete`,
`findAndModify`, `aggregate`, `count`, `createIndexes`, `listIndexes`, `drop`, `dropDatabase`,
`listCollections` and `listDatabases`.

Every command runs under one global lock, so an operation on one document (a `findAndModify`,
an upsert, an insert that a unique index refuses) is atomic, as it is in `mongod`.

What it is not: a replica set, a sharded cluster, or a server with authentication, transactions,
change streams, write concerns, tailable cursors, compression or TLS. Cursors return everything
in their first batch. Server-side `$$NOW` is not evaluated (mongomock does not know it).

Usage: python wire_server.py [--port N] [--exit-on-stdin-eof] [--verbose]
It prints `listening on 127.0.0.1:PORT` once it accepts connections.
"""

import argparse
import datetime
import itertools
import os
import sys
import threading
import traceback

import mockupdb
import mongomock
from bson.int64 import Int64
from pymongo import ReturnDocument

# mongod's error codes that drivers and the store look at.
DUPLICATE_KEY = 11000
COMMAND_NOT_FOUND = 59
CURSOR_NOT_FOUND = 43
BAD_VALUE = 2
INTERNAL_ERROR = 1
COMMAND_NOT_SUPPORTED = 115

# Wire versions 0..17: the handshake says "MongoDB 6.0", which every 3.x Rust driver accepts.
MAX_WIRE_VERSION = 17

LOCK = threading.Lock()
CLIENT = mongomock.MongoClient()
CONNECTION_IDS = itertools.count(1)
VERBOSE = False


def log(*parts):
    if VERBOSE:
        print(*parts, file=sys.stderr, flush=True)


def utcnow():
    return datetime.datetime.now(datetime.timezone.utc)


class CommandError(Exception):
    """A command failure with mongod's error code."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def database_name(request):
    if isinstance(request, mockupdb.OpMsg):
        return request.doc.get("$db", "admin")
    return (request.namespace or "admin").split(".")[0]


def collection(request):
    name = request.doc[request.command_name]
    if not isinstance(name, str):
        raise CommandError(BAD_VALUE, "collection name must be a string")
    return CLIENT[database_name(request)][name]


def namespace(request):
    return "%s.%s" % (database_name(request), request.doc[request.command_name])


def hello(_request):
    return {
        "helloOk": True,
        "ismaster": True,
        "isWritablePrimary": True,
        "maxBsonObjectSize": 16 * 1024 * 1024,
        "maxMessageSizeBytes": 48_000_000,
        "maxWriteBatchSize": 100_000,
        "localTime": utcnow(),
        "logicalSessionTimeoutMinutes": 30,
        "connectionId": next(CONNECTION_IDS),
        "minWireVersion": 0,
        "maxWireVersion": MAX_WIRE_VERSION,
        "readOnly": False,
    }


def build_info(_request):
    return {"version": "6.0.0-mockupdb-mongomock", "versionArray": [6, 0, 0, 0]}


def sort_spec(doc):
    sort = doc.get("sort")
    return list(sort.items()) if sort else None


def cursor_reply(request, docs, field="firstBatch"):
    return {"cursor": {"id": Int64(0), "ns": namespace(request), field: list(docs)}}


def find(request):
    doc = request.doc
    coll = collection(request)
    limit = abs(int(doc.get("limit", 0) or 0))
    if doc.get("singleBatch") and doc.get("batchSize"):
        limit = min(limit or doc["batchSize"], doc["batchSize"])
    docs = coll.find(
        doc.get("filter") or {},
        doc.get("projection"),
        skip=int(doc.get("skip", 0) or 0),
        limit=limit,
        sort=sort_spec(doc),
    )
    return cursor_reply(request, docs)


def write_error(index, exc):
    code = getattr(exc, "code", None) or INTERNAL_ERROR
    if isinstance(exc, mongomock.DuplicateKeyError):
        code = DUPLICATE_KEY
    return {"index": index, "code": code, "errmsg": str(exc)}


def insert(request):
    coll = collection(request)
    ordered = request.doc.get("ordered", True)
    inserted, errors = 0, []
    for i, document in enumerate(request.doc.get("documents", [])):
        try:
            coll.insert_one(document)
            inserted += 1
        except (mongomock.DuplicateKeyError, mongomock.WriteError) as e:
            errors.append(write_error(i, e))
            if ordered:
                break
    reply = {"n": inserted}
    if errors:
        reply["writeErrors"] = errors
    return reply


def is_replacement(update):
    return isinstance(update, dict) and not any(k.startswith("$") for k in update)


def update(request):
    coll = collection(request)
    ordered = request.doc.get("ordered", True)
    matched, modified, upserted, errors = 0, 0, [], []
    for i, spec in enumerate(request.doc.get("updates", [])):
        query, change = spec.get("q", {}), spec.get("u", {})
        upsert, multi = bool(spec.get("upsert")), bool(spec.get("multi"))
        try:
            if is_replacement(change):
                result = coll.replace_one(query, change, upsert=upsert)
            elif multi:
                result = coll.update_many(query, change, upsert=upsert)
            else:
                result = coll.update_one(query, change, upsert=upsert)
        except (mongomock.DuplicateKeyError, mongomock.WriteError) as e:
            errors.append(write_error(i, e))
            if ordered:
                break
            continue
        if result.upserted_id is not None:
            upserted.append({"index": i, "_id": result.upserted_id})
            matched += 1
        else:
            matched += result.matched_count
            modified += result.modified_count
    reply = {"n": matched, "nModified": modified}
    if upserted:
        reply["upserted"] = upserted
    if errors:
        reply["writeErrors"] = errors
    return reply


def delete(request):
    coll = collection(request)
    removed = 0
    for spec in request.doc.get("deletes", []):
        query = spec.get("q", {})
        if spec.get("limit", 0) == 1:
            removed += coll.delete_one(query).deleted_count
        else:
            removed += coll.delete_many(query).deleted_count
    return {"n": removed}


def find_and_modify(request):
    doc = request.doc
    coll = collection(request)
    query = doc.get("query") or {}
    sort = sort_spec(doc)
    fields = doc.get("fields")
    before = coll.find_one(query, sort=sort)
    if doc.get("remove"):
        if before is not None:
            coll.delete_one({"_id": before["_id"]})
        value = None if before is None else coll_project(coll, before, fields)
        return {"lastErrorObject": {"n": int(before is not None)}, "value": value}
    change = doc.get("update")
    if change is None:
        raise CommandError(BAD_VALUE, "either an update or remove=true must be specified")
    upsert = bool(doc.get("upsert"))
    try:
        if is_replacement(change):
            after = coll.find_one_and_replace(
                query, change, sort=sort, upsert=upsert, return_document=ReturnDocument.AFTER
            )
        else:
            after = coll.find_one_and_update(
                query, change, sort=sort, upsert=upsert, return_document=ReturnDocument.AFTER
            )
    except mongomock.DuplicateKeyError as e:
        raise CommandError(DUPLICATE_KEY, "E11000 duplicate key error: %s" % e) from e
    last = {"n": int(after is not None), "updatedExisting": before is not None}
    if before is None and after is not None:
        last["upserted"] = after["_id"]
    if doc.get("new"):
        value = None if after is None else coll.find_one({"_id": after["_id"]}, fields)
    else:
        value = None if before is None else coll_project(coll, before, fields)
    return {"lastErrorObject": last, "value": value}


def coll_project(coll, document, fields):
    """`document` as a projection `fields` would return it (used for pre-images)."""
    if not fields:
        return document
    scratch = mongomock.MongoClient()["scratch"][coll.name]
    scratch.insert_one(document)
    return scratch.find_one({"_id": document["_id"]}, fields)


def aggregate(request):
    coll = collection(request)
    return cursor_reply(request, coll.aggregate(request.doc.get("pipeline", [])))


def count(request):
    coll = collection(request)
    n = coll.count_documents(
        request.doc.get("query") or {},
        skip=int(request.doc.get("skip", 0) or 0),
        **({"limit": int(request.doc["limit"])} if request.doc.get("limit") else {}),
    )
    return {"n": n}


def create_indexes(request):
    coll = collection(request)
    existed = coll.name in coll.database.list_collection_names()
    before = len(coll.index_information()) if existed else 0
    created_collection = not existed
    for spec in request.doc.get("indexes", []):
        options = {
            k: v
            for k, v in spec.items()
            if k in ("name", "unique", "sparse", "expireAfterSeconds", "partialFilterExpression")
        }
        coll.create_index(list(spec["key"].items()), **options)
    after = len(coll.index_information())
    return {
        "createdCollectionAutomatically": created_collection,
        "numIndexesBefore": max(before, 1),
        "numIndexesAfter": after,
    }


def list_indexes(request):
    coll = collection(request)
    docs = []
    for name, info in coll.index_information().items():
        entry = {"v": 2, "key": dict(info["key"]), "name": name}
        entry.update({k: v for k, v in info.items() if k not in ("key", "v")})
        docs.append(entry)
    return cursor_reply(request, docs)


def drop(request):
    collection(request).drop()
    return {"ns": namespace(request), "nIndexesWas": 1}


def drop_database(request):
    CLIENT.drop_database(database_name(request))
    return {"dropped": database_name(request)}


def list_collections(request):
    db = CLIENT[database_name(request)]
    docs = [{"name": n, "type": "collection", "options": {}} for n in db.list_collection_names()]
    ns = database_name(request) + ".$cmd.listCollections"
    return {"cursor": {"id": Int64(0), "ns": ns, "firstBatch": docs}}


def list_databases(_request):
    names = CLIENT.list_database_names()
    databases = [{"name": n, "sizeOnDisk": 0, "empty": False} for n in names]
    return {"databases": databases, "totalSize": 0}


def get_more(request):
    raise CommandError(CURSOR_NOT_FOUND, "cursor id %s not found" % request.doc.get("getMore"))


def kill_cursors(request):
    # Every cursor is exhausted in its first batch, so none is ever open.
    return {
        "cursorsKilled": [],
        "cursorsNotFound": request.doc.get("cursors", []),
        "cursorsAlive": [],
        "cursorsUnknown": [],
    }


def ok(_request):
    return {}


COMMANDS = {
    "hello": hello,
    "ismaster": hello,
    "isMaster": hello,
    "ping": ok,
    "buildInfo": build_info,
    "buildinfo": build_info,
    "endSessions": ok,
    "find": find,
    "getMore": get_more,
    "killCursors": kill_cursors,
    "insert": insert,
    "update": update,
    "delete": delete,
    "findAndModify": find_and_modify,
    "findandmodify": find_and_modify,
    "aggregate": aggregate,
    "count": count,
    "createIndexes": create_indexes,
    "listIndexes": list_indexes,
    "drop": drop,
    "dropDatabase": drop_database,
    "listCollections": list_collections,
    "listDatabases": list_databases,
}


def respond(request):
    """The one autoresponder: answers every request, one at a time."""
    name = request.command_name
    handler = COMMANDS.get(name)
    with LOCK:
        try:
            if handler is None:
                raise CommandError(COMMAND_NOT_FOUND, "no such command: '%s'" % name)
            reply = handler(request)
        except CommandError as e:
            log("error", name, e.code, e)
            return request.command_err(code=e.code, errmsg=str(e))
        except mongomock.OperationFailure as e:
            log("error", name, e)
            return request.command_err(code=e.code or BAD_VALUE, errmsg=str(e))
        except NotImplementedError as e:
            log("unsupported", name, e)
            return request.command_err(code=COMMAND_NOT_SUPPORTED, errmsg="mongomock: %s" % e)
        except Exception as e:  # a bug here must reach the client, not kill the connection
            traceback.print_exc()
            return request.command_err(code=INTERNAL_ERROR, errmsg="%s: %s" % (type(e).__name__, e))
    log(name, "->", reply)
    return request.reply(reply)


def exit_when_parent_goes(stream):
    """Ends the process once stdin closes: the test that started us is gone."""
    while stream.read(1024):
        pass
    os._exit(0)


def main():
    global VERBOSE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--exit-on-stdin-eof", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="log every command to stderr")
    args = parser.parse_args()
    VERBOSE = args.verbose
    server = mockupdb.MockupDB(port=args.port, request_timeout=10**6)
    server.autoresponds(respond)
    port = server.run()
    print("listening on 127.0.0.1:%d" % port, flush=True)
    if args.exit_on_stdin_eof:
        exit_when_parent_goes(sys.stdin.buffer)
    else:
        threading.Event().wait()


if __name__ == "__main__":
    main()
