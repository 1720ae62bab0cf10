#!/usr/bin/env python3
"""Write a tiny, valid pure-Python wheel: example_wheel.py OUT_DIR NAME VERSION.

Prints the wheel's path. Only the standard library is used, so it runs on a fresh machine.
"""
import base64
import hashlib
import sys
import zipfile


def record_hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def main() -> None:
    out_dir, name, version = sys.argv[1:4]
    dist = name.replace("-", "_").replace(".", "_")
    dist_info = f"{dist}-{version}.dist-info"
    members = {
        f"{dist.lower()}/__init__.py": f'"""The {name} example from Quarry."""\n\nVERSION = "{version}"\n',
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nRequires-Python: >=3.8\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: quarry-example\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{p},sha256={record_hash(c.encode())},{len(c.encode())}\n" for p, c in members.items())
    members[f"{dist_info}/RECORD"] = record + f"{dist_info}/RECORD,,\n"
    path = f"{out_dir}/{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for member, content in members.items():
            info = zipfile.ZipInfo(member, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, content)
    print(path)


if __name__ == "__main__":
    main()
