-- The nine base relations of the paper's evaluation (SMILE §9.1, Table 1).
-- Key columns are the paper's; the others are ours (docs/dataset.md explains each).
-- users and tweets have primary keys; the seven others are bags (no key, duplicates allowed),
-- as unpacked tweet entities are. Each statement creates one relation: the loader runs the one
-- for a relation on the machine the placement gives it.

-- relation: users
CREATE TABLE IF NOT EXISTS public.users (
    uid         bigint PRIMARY KEY,
    screen_name text NOT NULL,
    lang        text,
    followers   integer NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL
);

-- relation: tweets
CREATE TABLE IF NOT EXISTS public.tweets (
    tid        bigint PRIMARY KEY,
    uid        bigint NOT NULL,
    text       text NOT NULL,
    lang       text,
    created_at timestamptz NOT NULL
);

-- relation: socnet
CREATE TABLE IF NOT EXISTS public.socnet (
    uid   bigint NOT NULL,
    uid2  bigint NOT NULL,
    since timestamptz NOT NULL
);

-- relation: loc
CREATE TABLE IF NOT EXISTS public.loc (
    uid   bigint NOT NULL,
    place text NOT NULL,
    lat   double precision,
    lng   double precision
);

-- relation: curloc
CREATE TABLE IF NOT EXISTS public.curloc (
    tid bigint NOT NULL,
    lat double precision NOT NULL,
    lng double precision NOT NULL
);

-- relation: urls
CREATE TABLE IF NOT EXISTS public.urls (
    tid bigint NOT NULL,
    url text NOT NULL
);

-- relation: hashtags
CREATE TABLE IF NOT EXISTS public.hashtags (
    tid  bigint NOT NULL,
    tags text NOT NULL
);

-- relation: photos
CREATE TABLE IF NOT EXISTS public.photos (
    tid  bigint NOT NULL,
    urls text NOT NULL
);

-- relation: foursq
CREATE TABLE IF NOT EXISTS public.foursq (
    tid   bigint NOT NULL,
    rid   bigint NOT NULL,
    venue text
);
