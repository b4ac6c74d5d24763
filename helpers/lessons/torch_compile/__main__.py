"""``python -m helpers.lessons.torch_compile SPEC``: one compiled step in a fresh process (``dynamo.start_child``)."""

import json
import sys

from .dynamo import start_child

print(json.dumps(start_child(json.loads(sys.argv[1]))))
