#!/bin/bash
wc -l < data/records.txt | tr -d ' ' > count.txt
