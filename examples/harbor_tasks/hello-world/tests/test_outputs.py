from pathlib import Path

hello = Path("/app/hello.txt")
assert hello.exists(), f"{hello} does not exist"
assert hello.read_text().strip() == "Hello, world!", f"{hello} holds {hello.read_text()!r}"
